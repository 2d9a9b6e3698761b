#pragma once
// Reductions of a rank's local shard over one dimension: x is
// [outer, n, inner] (as_3d(shard, ...) folds the dimensions before and after
// the reduced one), y is [outer, inner]. n == 0 gives the op's identity
// (Kokkos::reduction_identity: 0, -inf, +inf, 1 for floating types).
// Reductions run in accumulation_t of the elements (float for bf16 and fp16).

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

namespace shardmesh::ops::local {

namespace detail {

template <reduce_op Op, class T>
KOKKOS_INLINE_FUNCTION T identity_of() {
  if constexpr (Op == reduce_op::sum)
    return Kokkos::reduction_identity<T>::sum();
  else if constexpr (Op == reduce_op::max)
    return Kokkos::reduction_identity<T>::max();
  else if constexpr (Op == reduce_op::min)
    return Kokkos::reduction_identity<T>::min();
  else
    return Kokkos::reduction_identity<T>::prod();
}

template <reduce_op Op, class T>
KOKKOS_INLINE_FUNCTION void combine(T& acc, T v) {
  if constexpr (Op == reduce_op::sum)
    acc += v;
  else if constexpr (Op == reduce_op::max)
    acc = Kokkos::max(acc, v);
  else if constexpr (Op == reduce_op::min)
    acc = Kokkos::min(acc, v);
  else
    acc *= v;
}

template <reduce_op Op, class T>
using reducer_of =
    std::conditional_t<Op == reduce_op::sum, Kokkos::Sum<T>,
                       std::conditional_t<Op == reduce_op::max, Kokkos::Max<T>,
                                          std::conditional_t<Op == reduce_op::min, Kokkos::Min<T>, Kokkos::Prod<T>>>>;

template <reduce_op Op, class ExecSpace, class X, class Y>
void reduce_with(ExecSpace const& exec, X const& x, Y const& y) {
  using T = accumulation_t<typename X::non_const_value_type>;
  using Out = typename Y::non_const_value_type;
  std::size_t const n = x.extent(1);
  std::size_t const inner = x.extent(2);
  if (inner == 1) {
    // Reducing the contiguous dimension: a team per output, so that a long
    // row does not fall to one thread.
    using policy = Kokkos::TeamPolicy<ExecSpace>;
    Kokkos::parallel_for(
        "shardmesh::reduce_forward", policy(exec, league_size("reduce_forward", x.extent(0)), Kokkos::AUTO),
        KOKKOS_LAMBDA(typename policy::member_type const& team) {
          auto const o = static_cast<std::size_t>(team.league_rank());
          T acc = identity_of<Op, T>();
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, n),
              [&](std::size_t k, T& a) { combine<Op>(a, static_cast<T>(x(o, k, 0))); }, reducer_of<Op, T>(acc));
          Kokkos::single(Kokkos::PerTeam(team), [&]() { y(o, 0) = static_cast<Out>(acc); });
        });
  } else {
    // A thread per output walks n: neighbouring threads read neighbouring elements.
    Kokkos::parallel_for(
        "shardmesh::reduce_forward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, y.size()),
        KOKKOS_LAMBDA(std::size_t idx) {
          std::size_t const o = idx / inner;
          std::size_t const i = idx % inner;
          T acc = identity_of<Op, T>();
          for (std::size_t k = 0; k < n; ++k) combine<Op>(acc, static_cast<T>(x(o, k, i)));
          y(o, i) = static_cast<Out>(acc);
        });
  }
}

template <class X, class Y, class DY, class DX>
void check_backward(char const* kernel, X const& x, Y const& y, DY const& dy, DX const& dx) {
  require_same_extents(kernel, "x", x, "dx", dx);
  require_same_extents(kernel, "y", y, "dy", dy);
  require(y.extent(0) == x.extent(0) && y.extent(1) == x.extent(2), kernel, "y is " + shape(y) + " for x " + shape(x));
}

}  // namespace detail

// y[o][i] = op over k of x[o][k][i].
template <class ExecSpace, local_view<3, ExecSpace> X, local_view<2, ExecSpace> Y>
void reduce_forward(ExecSpace const& exec, reduce_op op, X const& x, Y const& y) {
  detail::require(y.extent(0) == x.extent(0) && y.extent(1) == x.extent(2), "reduce_forward",
                  "y is " + detail::shape(y) + " for x " + detail::shape(x));
  switch (op) {
    case reduce_op::sum: detail::reduce_with<reduce_op::sum>(exec, x, y); return;
    case reduce_op::max: detail::reduce_with<reduce_op::max>(exec, x, y); return;
    case reduce_op::min: detail::reduce_with<reduce_op::min>(exec, x, y); return;
    case reduce_op::prod: detail::reduce_with<reduce_op::prod>(exec, x, y); return;
  }
}

// The gradient of a sum: dx[o][k][i] = dy[o][i] for every k.
template <class ExecSpace, local_view<2, ExecSpace> DY, local_view<3, ExecSpace> DX>
void reduce_sum_backward(ExecSpace const& exec, DY const& dy, DX const& dx) {
  detail::require(dy.extent(0) == dx.extent(0) && dy.extent(1) == dx.extent(2), "reduce_sum_backward",
                  "dy is " + detail::shape(dy) + " for dx " + detail::shape(dx));
  std::size_t const n = dx.extent(1);
  std::size_t const inner = dx.extent(2);
  Kokkos::parallel_for(
      "shardmesh::reduce_sum_backward",
      Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, dx.size()),
      KOKKOS_LAMBDA(std::size_t idx) {
        std::size_t const i = idx % inner;
        std::size_t const k = idx / inner % n;
        std::size_t const o = idx / inner / n;
        dx(o, k, i) = dy(o, i);
      });
}

namespace detail {

// dx = dy where x equals its reduced value, 0 elsewhere: max and min alike.
template <class ExecSpace, class X, class Y, class DY, class DX>
void extremum_backward(char const* label, ExecSpace const& exec, X const& x, Y const& y, DY const& dy, DX const& dx) {
  using T = typename DX::non_const_value_type;
  std::size_t const n = x.extent(1);
  std::size_t const inner = x.extent(2);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, x.size()),
      KOKKOS_LAMBDA(std::size_t idx) {
        std::size_t const i = idx % inner;
        std::size_t const k = idx / inner % n;
        std::size_t const o = idx / inner / n;
        dx(o, k, i) = x(o, k, i) == y(o, i) ? static_cast<T>(dy(o, i)) : static_cast<T>(0.0f);
      });
}

}  // namespace detail

// The gradient of a max, y = reduce_forward(max, x): dx[o][k][i] = dy[o][i]
// where x[o][k][i] == y[o][i], else 0. Every tied maximum receives the whole
// dy (not a share of it), so ties count dy more than once.
template <class ExecSpace, local_view<3, ExecSpace> X, local_view<2, ExecSpace> Y, local_view<2, ExecSpace> DY,
          local_view<3, ExecSpace> DX>
void reduce_max_backward(ExecSpace const& exec, X const& x, Y const& y, DY const& dy, DX const& dx) {
  detail::check_backward("reduce_max_backward", x, y, dy, dx);
  detail::extremum_backward("shardmesh::reduce_max_backward", exec, x, y, dy, dx);
}

// The same for a min; ties likewise each receive dy.
template <class ExecSpace, local_view<3, ExecSpace> X, local_view<2, ExecSpace> Y, local_view<2, ExecSpace> DY,
          local_view<3, ExecSpace> DX>
void reduce_min_backward(ExecSpace const& exec, X const& x, Y const& y, DY const& dy, DX const& dx) {
  detail::check_backward("reduce_min_backward", x, y, dy, dx);
  detail::extremum_backward("shardmesh::reduce_min_backward", exec, x, y, dy, dx);
}

}  // namespace shardmesh::ops::local
