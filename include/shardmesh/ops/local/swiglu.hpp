#pragma once
// SwiGLU's gating on a rank's local shard, element by element (Shazeer
// 2020): h = silu(gate) * up, silu(a) = a sigmoid(a). Backward:
//   d_up = dh silu(gate),  d_gate = dh up silu'(gate),
//   silu'(a) = s (1 + a (1 - s)), s = sigmoid(a).
// Views are 1-D (flat(shard) gives one). h may be gate or up; the
// gradients may be dh.

#include "shardmesh/ops/local/exponential.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace shardmesh::ops::local {

template <class T>
KOKKOS_INLINE_FUNCTION T sigmoid(T a) {
  return static_cast<T>(1) / (static_cast<T>(1) + exponential(-a));
}

// h = silu(gate) * up.
template <class ExecSpace, local_view<1, ExecSpace> G, local_view<1, ExecSpace> U, local_view<1, ExecSpace> H>
void swiglu_forward(ExecSpace const& exec, G const& gate, U const& up, H const& h) {
  detail::require_same_extents("swiglu_forward", "gate", gate, "up", up);
  detail::require_same_extents("swiglu_forward", "gate", gate, "h", h);
  using T = typename G::non_const_value_type;
  Kokkos::parallel_for(
      "shardmesh::swiglu_forward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, h.size()),
      KOKKOS_LAMBDA(std::size_t i) {
        T const a = static_cast<T>(gate(i));
        h(i) = a * sigmoid(a) * static_cast<T>(up(i));
      });
}

// d_gate and d_up from dh.
template <class ExecSpace, local_view<1, ExecSpace> G, local_view<1, ExecSpace> U, local_view<1, ExecSpace> DH,
          local_view<1, ExecSpace> DG, local_view<1, ExecSpace> DU>
void swiglu_backward(ExecSpace const& exec, G const& gate, U const& up, DH const& dh, DG const& d_gate,
                     DU const& d_up) {
  constexpr char const* kernel = "swiglu_backward";
  detail::require_same_extents(kernel, "gate", gate, "up", up);
  detail::require_same_extents(kernel, "gate", gate, "dh", dh);
  detail::require_same_extents(kernel, "gate", gate, "d_gate", d_gate);
  detail::require_same_extents(kernel, "gate", gate, "d_up", d_up);
  using T = typename G::non_const_value_type;
  Kokkos::parallel_for(
      "shardmesh::swiglu_backward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, dh.size()),
      KOKKOS_LAMBDA(std::size_t i) {
        T const a = static_cast<T>(gate(i));
        T const u = static_cast<T>(up(i));
        T const d = static_cast<T>(dh(i));
        T const s = sigmoid(a);
        d_gate(i) = d * u * s * (static_cast<T>(1) + a * (static_cast<T>(1) - s));
        d_up(i) = d * a * s;
      });
}

}  // namespace shardmesh::ops::local
