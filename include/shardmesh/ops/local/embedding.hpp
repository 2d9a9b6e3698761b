#pragma once
// The local parts of an embedding lookup over a shard of the table: rows
// [first, first + table rows) of the vocabulary live here. Ids outside the
// shard give zeros (forward) and touch nothing (backward), so the ranks'
// results sum to the whole lookup.

#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace shardmesh::ops::local {

// out[r][j] = table[ids[r] - first][j] if this shard holds ids[r], else 0.
template <class ExecSpace, local_view<1, ExecSpace> Ids, local_view<2, ExecSpace> Table, local_view<2, ExecSpace> Out>
void embedding_forward(ExecSpace const& exec, Ids const& ids, Table const& table, std::size_t first, Out const& out) {
  using T = typename Out::non_const_value_type;
  detail::require(
      out.extent(0) == ids.extent(0) && out.extent(1) == table.extent(1), "embedding_forward",
      "out is " + detail::shape(out) + " for ids " + detail::shape(ids) + " and table " + detail::shape(table));
  std::size_t const rows = table.extent(0);
  Kokkos::parallel_for(
      "shardmesh::embedding_forward",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {out.extent(0), out.extent(1)}),
      KOKKOS_LAMBDA(std::size_t r, std::size_t j) {
        auto const id = static_cast<std::size_t>(ids(r));
        out(r, j) = id >= first && id < first + rows ? table(id - first, j) : T(0);
      });
}

// table_grad[ids[r] - first][j] += dy[r][j] for the ids this shard holds
// (table_grad is not cleared first; it may hold float where dy holds bf16).
template <class ExecSpace, local_view<1, ExecSpace> Ids, local_view<2, ExecSpace> DY, local_view<2, ExecSpace> Grad>
void embedding_backward(ExecSpace const& exec, Ids const& ids, DY const& dy, std::size_t first, Grad const& grad) {
  detail::require(
      dy.extent(0) == ids.extent(0) && dy.extent(1) == grad.extent(1), "embedding_backward",
      "dy is " + detail::shape(dy) + " for ids " + detail::shape(ids) + " and gradient " + detail::shape(grad));
  std::size_t const rows = grad.extent(0);
  Kokkos::parallel_for(
      "shardmesh::embedding_backward",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {dy.extent(0), dy.extent(1)}),
      KOKKOS_LAMBDA(std::size_t r, std::size_t j) {
        auto const id = static_cast<std::size_t>(ids(r));
        if (id >= first && id < first + rows)
          Kokkos::atomic_add(&grad(id - first, j), static_cast<typename Grad::non_const_value_type>(dy(r, j)));
      });
}

}  // namespace shardmesh::ops::local
