#pragma once
// GELU on a rank's local shard, element by element, in its tanh form:
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3),
// computed as x s with s = 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): one
// exponential, where the C library's float tanh costs several times that
// (it works in double precision), and no cancellation near 0.
// Views are 1-D (flat(shard) gives one). y may be x; dx may be dy.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/exponential.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace shardmesh::ops::local {

namespace detail {
// 0.5 (1 + tanh(u)) for GELU's u, as T (constants local, so that device code may use them).
template <class T>
KOKKOS_INLINE_FUNCTION T gelu_gate(T x) {
  constexpr T two_k = static_cast<T>(2 * 0.79788456080286535588);
  constexpr T c = static_cast<T>(0.044715);
  return static_cast<T>(1) / (static_cast<T>(1) + exponential(-two_k * (x + c * x * x * x)));
}
}  // namespace detail

template <class T>
KOKKOS_INLINE_FUNCTION T gelu(T x) {
  return x * detail::gelu_gate(x);
}

// d gelu / dx = s + 2 x s (1 - s) k (1 + 3 c x^2), s = 0.5 (1 + tanh(u))
// (0.5 (1 - tanh(u)^2) = 2 s (1 - s)).
template <class T>
KOKKOS_INLINE_FUNCTION T gelu_derivative(T x) {
  constexpr T two_k = static_cast<T>(2 * 0.79788456080286535588);
  constexpr T c3 = static_cast<T>(3 * 0.044715);
  T const s = detail::gelu_gate(x);
  // x times the gate's slope first: 0 where the gate saturates, however
  // large x, so that no x^2 overflows into 0 * inf (for finite x; the loop
  // stays free of branches, which would keep it from vectorising).
  T const xs = x * s * (static_cast<T>(1) - s);
  return s + two_k * (xs + c3 * (xs * x) * x);
}

// y = gelu(x).
template <class ExecSpace, local_view<1, ExecSpace> X, local_view<1, ExecSpace> Y>
void gelu_forward(ExecSpace const& exec, X const& x, Y const& y) {
  detail::require_same_extents("gelu_forward", "x", x, "y", y);
  using A = accumulation_t<typename X::non_const_value_type>;
  using T = typename Y::non_const_value_type;
  Kokkos::parallel_for(
      "shardmesh::gelu_forward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, x.size()),
      KOKKOS_LAMBDA(std::size_t i) { y(i) = static_cast<T>(gelu(static_cast<A>(x(i)))); });
}

// dx = dy * gelu'(x).
template <class ExecSpace, local_view<1, ExecSpace> X, local_view<1, ExecSpace> DY, local_view<1, ExecSpace> DX>
void gelu_backward(ExecSpace const& exec, X const& x, DY const& dy, DX const& dx) {
  detail::require_same_extents("gelu_backward", "x", x, "dy", dy);
  detail::require_same_extents("gelu_backward", "x", x, "dx", dx);
  using A = accumulation_t<typename X::non_const_value_type>;
  using T = typename DX::non_const_value_type;
  Kokkos::parallel_for(
      "shardmesh::gelu_backward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, x.size()),
      KOKKOS_LAMBDA(std::size_t i) {
        dx(i) = static_cast<T>(static_cast<A>(dy(i)) * gelu_derivative(static_cast<A>(x(i))));
      });
}

}  // namespace shardmesh::ops::local
