#pragma once
// SwiGLU's gating on a rank's local shard, element by element (Shazeer
// 2020): h = silu(gate) * up, silu(a) = a sigmoid(a). Backward:
//   d_up = dh silu(gate),  d_gate = dh up silu'(gate),
//   silu'(a) = s (1 + a (1 - s)), s = sigmoid(a).
// Views are 1-D (flat(shard) gives one). h may be gate or up; the
// gradients may be dh.

#include "shardmesh/comm/reduced_precision.hpp"
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
  using A = accumulation_t<typename G::non_const_value_type>;
  using T = typename H::non_const_value_type;
  Kokkos::parallel_for(
      "shardmesh::swiglu_forward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, h.size()),
      KOKKOS_LAMBDA(std::size_t i) {
        A const a = static_cast<A>(gate(i));
        h(i) = static_cast<T>(a * sigmoid(a) * static_cast<A>(up(i)));
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
  using A = accumulation_t<typename G::non_const_value_type>;
  using T = typename DG::non_const_value_type;
  Kokkos::parallel_for(
      "shardmesh::swiglu_backward", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, dh.size()),
      KOKKOS_LAMBDA(std::size_t i) {
        A const a = static_cast<A>(gate(i));
        A const u = static_cast<A>(up(i));
        A const d = static_cast<A>(dh(i));
        A const s = sigmoid(a);
        d_gate(i) = static_cast<T>(d * u * s * (static_cast<A>(1) + a * (static_cast<A>(1) - s)));
        d_up(i) = static_cast<typename DU::non_const_value_type>(d * a * s);
      });
}

}  // namespace shardmesh::ops::local
