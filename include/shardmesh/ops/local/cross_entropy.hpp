#pragma once
// The local parts of softmax cross-entropy over a shard of the classes:
// logits as rows [rows, n] holding classes [offset, offset + n) of each row.
// The row max, the sum of exponentials and the target's logit combine
// across the ranks that share a row (max, sum, sum); these kernels compute
// each rank's part and, given the combined values, the gradient. A negative
// target marks a row that does not count (padding): its gradient is 0.
// Computed in accumulation_t of the logits (float for bf16 and fp16).

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/exponential.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace shardmesh::ops::local {

// sum_exp[r] = sum_j exp(x[r][j] - max[r]); picked[r] = x[r][target[r] - offset]
// if this shard holds the target, else 0.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<1, ExecSpace> M, local_view<1, ExecSpace> Target,
          local_view<1, ExecSpace> S, local_view<1, ExecSpace> P>
void cross_entropy_parts(ExecSpace const& exec, X const& x, M const& max, Target const& target, std::size_t offset,
                         S const& sum_exp, P const& picked) {
  using A = accumulation_t<typename X::non_const_value_type>;
  using team = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  std::size_t const n = x.extent(1);
  detail::require(max.extent(0) == x.extent(0) && target.extent(0) == x.extent(0) && sum_exp.extent(0) == x.extent(0) &&
                      picked.extent(0) == x.extent(0),
                  "cross_entropy_parts", "row counts differ for x " + detail::shape(x));
  Kokkos::parallel_for(
      "shardmesh::cross_entropy_parts",
      Kokkos::TeamPolicy<ExecSpace>(exec, detail::league_size("cross_entropy_parts", x.extent(0)), Kokkos::AUTO),
      KOKKOS_LAMBDA(team const& member) {
        std::size_t const r = static_cast<std::size_t>(member.league_rank());
        A s{};
        A const top = static_cast<A>(max(r));
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(member, n),
            [&](std::size_t j, A& acc) { acc += exponential(static_cast<A>(x(r, j)) - top); }, s);
        Kokkos::single(Kokkos::PerTeam(member), [&] {
          sum_exp(r) = static_cast<typename S::non_const_value_type>(s);
          auto const t = static_cast<std::size_t>(target(r));
          picked(r) = static_cast<typename P::non_const_value_type>(
              t >= offset && t < offset + n ? static_cast<A>(x(r, t - offset)) : A(0));
        });
      });
}

// dx[r][j] = scale * (exp(x[r][j] - max[r]) / sum_exp[r] - [j + offset == target[r]]), 0 if target[r] < 0.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<1, ExecSpace> M, local_view<1, ExecSpace> S,
          local_view<1, ExecSpace> Target, local_view<2, ExecSpace> DX>
void cross_entropy_backward(ExecSpace const& exec, X const& x, M const& max, S const& sum_exp, Target const& target,
                            std::size_t offset, accumulation_t<typename X::non_const_value_type> scale, DX const& dx) {
  using A = accumulation_t<typename X::non_const_value_type>;
  using T = typename DX::non_const_value_type;
  detail::require_same_extents("cross_entropy_backward", "x", x, "dx", dx);
  Kokkos::parallel_for(
      "shardmesh::cross_entropy_backward",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>(exec, {0, 0}, {x.extent(0), x.extent(1)}),
      KOKKOS_LAMBDA(std::size_t r, std::size_t j) {
        A const p = exponential(static_cast<A>(x(r, j)) - static_cast<A>(max(r))) / static_cast<A>(sum_exp(r));
        A const hit = static_cast<std::size_t>(target(r)) == j + offset ? A(1) : A(0);
        dx(r, j) = static_cast<T>(target(r) < 0 ? A(0) : scale * (p - hit));
      });
}

}  // namespace shardmesh::ops::local
