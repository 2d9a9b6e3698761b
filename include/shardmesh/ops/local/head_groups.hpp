#pragma once
// Grouped-query attention's sharing of key/value heads, on a rank's local
// shards [b*t, heads, d]: query head q (global) reads key/value head
// q / group. expand copies each local query head's key/value head out of
// the local key/value heads; its transpose, reduce, sums each local
// key/value head's gradient over the local query heads of its group.
// first_query and first_shared are the global indices of the shards' first
// heads; the key/value heads a rank's query heads need must be local.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace shardmesh::ops::local {

struct head_groups {
  std::size_t group = 1;         // query heads per key/value head
  std::size_t first_query = 0;   // the global index of the local first query head
  std::size_t first_shared = 0;  // the global index of the local first key/value head
};

// out[r, q, j] = shared[r, (first_query + q) / group - first_shared, j].
template <class ExecSpace, local_view<3, ExecSpace> S, local_view<3, ExecSpace> O>
void expand_heads(ExecSpace const& exec, S const& shared, O const& out, head_groups g) {
  detail::require(shared.extent(0) == out.extent(0) && shared.extent(2) == out.extent(2), "expand_heads",
                  "rows or head sizes differ: " + detail::shape(shared) + " and " + detail::shape(out));
  Kokkos::parallel_for(
      "shardmesh::expand_heads",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::size_t>>(
          exec, {0, 0, 0}, {out.extent(0), out.extent(1), out.extent(2)}),
      KOKKOS_LAMBDA(std::size_t r, std::size_t q, std::size_t j) {
        out(r, q, j) = shared(r, (g.first_query + q) / g.group - g.first_shared, j);
      });
}

// shared[r, k, j] = the sum of grad[r, q, j] over the local query heads q of key/value head first_shared + k.
template <class ExecSpace, local_view<3, ExecSpace> G, local_view<3, ExecSpace> S>
void reduce_heads(ExecSpace const& exec, G const& grad, S const& shared, head_groups g) {
  detail::require(shared.extent(0) == grad.extent(0) && shared.extent(2) == grad.extent(2), "reduce_heads",
                  "rows or head sizes differ: " + detail::shape(grad) + " and " + detail::shape(shared));
  using T = typename S::non_const_value_type;
  using A = accumulation_t<typename G::non_const_value_type>;
  std::size_t const queries = grad.extent(1);
  Kokkos::parallel_for(
      "shardmesh::reduce_heads",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::size_t>>(
          exec, {0, 0, 0}, {shared.extent(0), shared.extent(1), shared.extent(2)}),
      KOKKOS_LAMBDA(std::size_t r, std::size_t k, std::size_t j) {
        // Global query heads [(first_shared + k) group, + group), clipped to the local ones.
        std::size_t const from = (g.first_shared + k) * g.group;
        std::size_t const begin = from > g.first_query ? from - g.first_query : 0;
        std::size_t const end_global = from + g.group - g.first_query;
        std::size_t const end = from + g.group <= g.first_query ? 0 : (end_global < queries ? end_global : queries);
        A sum = 0;
        for (std::size_t q = begin; q < end; ++q) sum += static_cast<A>(grad(r, q, j));
        shared(r, k, j) = static_cast<T>(sum);
      });
}

}  // namespace shardmesh::ops::local
