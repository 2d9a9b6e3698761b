#pragma once
// Elementwise ops on dtensors of one shape. The operands are brought to the
// layout the rules give (algebra/propagation.hpp: equal placements, a
// replicated operand sliced to the other, partial sums only where the op is
// linear in them), communicating only when they do not fit; then each rank
// works on its shard.
//
//   add(a, b)  multiply(a, b)  scale(x, alpha)  gelu(x)  gelu_backward(x, dy)
//   swiglu(gate, up)  swiglu_backward(gate, up, dh)

#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/gelu.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/local/swiglu.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace shardmesh::ops {

namespace detail {

// Both operands moved to the layouts `kind` runs on, and the result, uninitialised.
template <class T, std::size_t Rank, class MemorySpace>
struct elementwise_operands {
  dynamic_dtensor<T, Rank, MemorySpace> a, b, out;
};

template <class T, std::size_t Rank, class MemorySpace>
elementwise_operands<T, Rank, MemorySpace> prepare(std::string_view op, elementwise_kind kind,
                                                   dynamic_dtensor<T, Rank, MemorySpace> const& a,
                                                   dynamic_dtensor<T, Rank, MemorySpace> const& b,
                                                   execution_space_of<MemorySpace> const& exec) {
  require_held(op, a, b);
  require_same_mesh(op, a, b);
  if (a.global_extents() != b.global_extents())
    throw mismatched_tensor_error(std::string(op) + ": " + a.notation() + " and " + b.notation() + " differ in shape");
  mesh_shape const& mesh = a.mesh().shape();
  fixed_text const problem = elementwise_error(mesh, a.bound(), b.bound());
  if (!problem.empty()) throw invalid_layout_error(std::string(op) + ": " + std::string(problem.view()));
  std::string key = std::string("elementwise ") + std::string(op) + " " + std::to_string(static_cast<int>(kind));
  add_to_key(key, mesh, a.bound(), extents_of(a));
  add_to_key(key, mesh, b.bound(), extents_of(b));
  op_layouts const& plan = planned(a.mesh(), key, [&] {
    return plan_elementwise(mesh, kind, a.bound(), b.bound(), extents_of(a), compute_model(a.mesh()));
  });
  auto const la = to_layout(a, plan.a, exec);
  auto const lb = &a == &b && plan.a == plan.b ? la : to_layout(b, plan.b, exec);  // a unary op moves x once
  return {la, lb, make_like<T, Rank, MemorySpace>(a.mesh(), plan.c, a.global_extents())};
}

}  // namespace detail

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> add(dynamic_dtensor<T, Rank, MemorySpace> const& a,
                                                        dynamic_dtensor<T, Rank, MemorySpace> const& b,
                                                        execution_space_of<MemorySpace> const& exec = {}) {
  auto const p = detail::prepare("add", elementwise_kind::linear, a, b, exec);
  local::add(exec, local::flat(p.a.local()), local::flat(p.b.local()), local::flat(p.out.local()));
  return p.out;
}

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> multiply(dynamic_dtensor<T, Rank, MemorySpace> const& a,
                                                             dynamic_dtensor<T, Rank, MemorySpace> const& b,
                                                             execution_space_of<MemorySpace> const& exec = {}) {
  auto const p = detail::prepare("multiply", elementwise_kind::bilinear, a, b, exec);
  local::multiply(exec, local::flat(p.a.local()), local::flat(p.b.local()), local::flat(p.out.local()));
  return p.out;
}

// alpha * x, in x's layout: partial sums stay partial (the op is linear);
// partial results of another op are reduced first.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> scale(dynamic_dtensor<T, Rank, MemorySpace> const& x, T alpha,
                                                          execution_space_of<MemorySpace> const& exec = {}) {
  require_held("scale", x);
  bound_layout l = x.bound();
  if (l.op != reduce_op::sum) l.partial_axes = {}, l.op = reduce_op::sum;
  auto const in = detail::to_layout(x, l, exec);
  auto out = detail::make_like<T, Rank, MemorySpace>(x.mesh(), l, x.global_extents());
  auto const from = local::flat(in.local());
  auto const to = local::flat(out.local());
  Kokkos::parallel_for(
      "shardmesh::scale", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, to.size()),
      KOKKOS_LAMBDA(std::size_t i) { to(i) = alpha * from(i); });
  return out;
}

// GELU, tanh approximation (ops/local/gelu.hpp); a partial input is reduced first.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> gelu(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                         execution_space_of<MemorySpace> const& exec = {}) {
  auto const p = detail::prepare("gelu", elementwise_kind::nonlinear, x, x, exec);
  local::gelu_forward(exec, local::flat(p.a.local()), local::flat(p.out.local()));
  return p.out;
}

// dx = gelu'(x) * dy.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> gelu_backward(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                                  dynamic_dtensor<T, Rank, MemorySpace> const& dy,
                                                                  execution_space_of<MemorySpace> const& exec = {}) {
  auto const p = detail::prepare("gelu_backward", elementwise_kind::nonlinear, x, dy, exec);
  local::gelu_backward(exec, local::flat(p.a.local()), local::flat(p.b.local()), local::flat(p.out.local()));
  return p.out;
}

// silu(gate) * up (ops/local/swiglu.hpp).
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> swiglu(dynamic_dtensor<T, Rank, MemorySpace> const& gate,
                                                           dynamic_dtensor<T, Rank, MemorySpace> const& up,
                                                           execution_space_of<MemorySpace> const& exec = {}) {
  auto const p = detail::prepare("swiglu", elementwise_kind::nonlinear, gate, up, exec);
  local::swiglu_forward(exec, local::flat(p.a.local()), local::flat(p.b.local()), local::flat(p.out.local()));
  return p.out;
}

template <class T, std::size_t Rank, class MemorySpace>
struct swiglu_gradients {
  dynamic_dtensor<T, Rank, MemorySpace> d_gate, d_up;
};

// The gradients of swiglu(gate, up) from dh's, in the layout gate and dh are brought to.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] swiglu_gradients<T, Rank, MemorySpace> swiglu_backward(dynamic_dtensor<T, Rank, MemorySpace> const& gate,
                                                                     dynamic_dtensor<T, Rank, MemorySpace> const& up,
                                                                     dynamic_dtensor<T, Rank, MemorySpace> const& dh,
                                                                     execution_space_of<MemorySpace> const& exec = {}) {
  require_held("swiglu_backward", gate, up, dh);
  auto const p = detail::prepare("swiglu_backward", elementwise_kind::nonlinear, gate, dh, exec);
  if (up.global_extents() != gate.global_extents())
    throw mismatched_tensor_error("swiglu_backward: " + up.notation() + " does not fit " + gate.notation());
  auto const u = detail::to_layout(up, p.a.bound(), exec);
  auto d_up = detail::make_like<T, Rank, MemorySpace>(gate.mesh(), p.out.bound(), gate.global_extents());
  local::swiglu_backward(exec, local::flat(p.a.local()), local::flat(u.local()), local::flat(p.b.local()),
                         local::flat(p.out.local()), local::flat(d_up.local()));
  return {p.out, d_up};
}

}  // namespace shardmesh::ops
