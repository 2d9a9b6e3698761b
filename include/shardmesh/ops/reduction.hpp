#pragma once
// Reductions of a dtensor over one dimension: the result lacks that
// dimension and, where the dimension was sharded, is partial with the op
// (algebra/propagation.hpp) — no communication until a caller asks for
// another layout. Partial sums of another op are reduced first.
//
//   auto m = reduce(x, 2, reduce_op::max);   // R,R,S(tp) -> R,R P(max:tp)
//   auto s = sum(x, 0);  mean(x, 0);  total(x)  (every element, on every rank)
//   sum_backward(x, 0, ds);  mean_backward(x, 0, dm);  max_backward(x, 0, m, dm)

#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/reduce.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>

namespace shardmesh::ops {

namespace detail {

// The [outer, n, inner] view of a shard around dimension dim.
template <class View>
auto around(View const& v, std::size_t dim) {
  std::size_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < View::rank(); ++d) (d < dim ? outer : inner) *= d == dim ? 1 : v.extent(d);
  return local::as_3d(v, outer, v.extent(dim), inner);
}

// The [outer, inner] view of a reduced shard (as_rows cannot tell outer when inner is 0).
template <class View, class Around>
auto reduced_view(View const& v, Around const& around) {
  return local::reshaped_view<View, 2>(v.data(), around.extent(0), around.extent(2));
}

template <class T, std::size_t Rank, class MemorySpace>
op_layouts const& reduction_plan(dynamic_dtensor<T, Rank, MemorySpace> const& x, std::size_t dim, reduce_op op) {
  if (dim >= Rank) throw invalid_layout_error("reduce: " + x.notation() + " has no dimension " + std::to_string(dim));
  mesh_shape const& mesh = x.mesh().shape();
  std::string key = "reduce " + std::to_string(dim) + " " + std::string(to_string(op));
  add_to_key(key, mesh, x.bound(), extents_of(x));
  return planned(x.mesh(), key,
                 [&] { return plan_reduction(mesh, x.bound(), dim, op, extents_of(x), compute_model(x.mesh())); });
}

template <std::size_t Rank>
tensor_index without_dim(tensor_index const& e, std::size_t dim) {
  tensor_index out{};
  for (std::size_t d = 0, k = 0; d < Rank; ++d)
    if (d != dim) out[k++] = e[d];
  return out;
}

}  // namespace detail

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank - 1, MemorySpace> reduce(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                               std::size_t dim, reduce_op op,
                                                               execution_space_of<MemorySpace> const& exec = {}) {
  require_held("reduce", x);
  static_assert(Rank >= 2, "reduce: use total() for the whole of a vector");
  op_layouts const plan = detail::reduction_plan(x, dim, op);
  auto const in = detail::to_layout(x, plan.a, exec);
  auto out =
      detail::make_like<T, Rank - 1, MemorySpace>(x.mesh(), plan.c, detail::without_dim<Rank>(x.global_extents(), dim));
  auto const v = detail::around(in.local(), dim);
  local::reduce_forward(exec, op, v, detail::reduced_view(out.local(), v));
  return out;
}

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] auto sum(dynamic_dtensor<T, Rank, MemorySpace> const& x, std::size_t dim,
                       execution_space_of<MemorySpace> const& exec = {}) {
  require_held("sum", x);
  return reduce(x, dim, reduce_op::sum, exec);
}

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] auto mean(dynamic_dtensor<T, Rank, MemorySpace> const& x, std::size_t dim,
                        execution_space_of<MemorySpace> const& exec = {}) {
  require_held("mean", x);
  auto s = reduce(x, dim, reduce_op::sum, exec);
  local::scale(exec, local::flat(s.local()), T(1) / static_cast<T>(x.global_extents()[dim]));
  return s;
}

namespace detail {

// dy (and, for max and min, the reduced y) whole on the axes that sharded
// dim, placed like the rest of the layout x was reduced in; dx in that layout.
template <class T, std::size_t Rank, class MemorySpace>
struct reduction_gradient {
  dynamic_dtensor<T, Rank, MemorySpace> x, dx;
  bound_layout reduced;  // the result's layout, partial axes made whole
};

template <class T, std::size_t Rank, class MemorySpace>
reduction_gradient<T, Rank, MemorySpace> gradient_of(dynamic_dtensor<T, Rank, MemorySpace> const& x, std::size_t dim,
                                                     reduce_op op, execution_space_of<MemorySpace> const& exec) {
  op_layouts const plan = reduction_plan(x, dim, op);
  bound_layout reduced = plan.c;
  reduced.partial_axes = {};
  reduced.op = reduce_op::sum;
  return {to_layout(x, plan.a, exec), make_like<T, Rank, MemorySpace>(x.mesh(), plan.a, x.global_extents()), reduced};
}

}  // namespace detail

// The gradient of reduce(x, dim, sum) (and, scaled, of mean): dy broadcast
// along dim, in the layout the forward ran x on.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> sum_backward(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                                 std::size_t dim,
                                                                 dynamic_dtensor<T, Rank - 1, MemorySpace> const& dy,
                                                                 execution_space_of<MemorySpace> const& exec = {}) {
  require_held("sum_backward", x, dy);
  auto g = detail::gradient_of(x, dim, reduce_op::sum, exec);
  auto const d = detail::to_layout(dy, g.reduced, exec);
  auto const v = detail::around(g.dx.local(), dim);
  local::reduce_sum_backward(exec, detail::reduced_view(d.local(), v), v);
  return g.dx;
}

// The gradient of mean(x, dim): dy / extent broadcast along dim.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> mean_backward(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                                  std::size_t dim,
                                                                  dynamic_dtensor<T, Rank - 1, MemorySpace> const& dy,
                                                                  execution_space_of<MemorySpace> const& exec = {}) {
  require_held("mean_backward", x, dy);
  auto dx = sum_backward(x, dim, dy, exec);
  local::scale(exec, local::flat(dx.local()), T(1) / static_cast<T>(x.global_extents()[dim]));
  return dx;
}

// The gradient of y = reduce(x, dim, max): dy where x equals the maximum,
// 0 elsewhere (every tied element receives it).
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> max_backward(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                                 std::size_t dim,
                                                                 dynamic_dtensor<T, Rank - 1, MemorySpace> const& y,
                                                                 dynamic_dtensor<T, Rank - 1, MemorySpace> const& dy,
                                                                 execution_space_of<MemorySpace> const& exec = {}) {
  require_held("max_backward", x, y, dy);
  auto g = detail::gradient_of(x, dim, reduce_op::max, exec);
  auto const m = detail::to_layout(y, g.reduced, exec);
  auto const d = detail::to_layout(dy, g.reduced, exec);
  auto const v = detail::around(g.dx.local(), dim);
  local::reduce_max_backward(exec, detail::around(g.x.local(), dim), detail::reduced_view(m.local(), v),
                             detail::reduced_view(d.local(), v), v);
  return g.dx;
}

// The sum of every element, on every rank: a local sum, then one
// all-reduce over the axes that shard x or that it is partial on.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] T total(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                      execution_space_of<MemorySpace> const& exec = {}) {
  require_held("total", x);
  if (x.layout().is_partial() && x.layout().op != reduce_op::sum)
    throw invalid_layout_error("total: " + x.notation() + " is partial with another op than sum");
  T local_sum{};
  auto const v = local::flat(x.local());
  Kokkos::parallel_reduce(
      "shardmesh::total", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, v.size()),
      KOKKOS_LAMBDA(std::size_t i, T& acc) { acc += v(i); }, local_sum);
  axis_set const axes = sharding_axes(x.bound()) | x.bound().partial_axes;
  if (axes.empty()) return local_sum;
  return all_reduce_value(x.mesh().group(axes), local_sum, reduce_op::sum);
}

}  // namespace shardmesh::ops
