#pragma once
// Layer norm of a dtensor over its last dimension, with gain and bias
// vectors. A row-wise op: the input is moved to the cheapest layout with the
// last dimension whole and nothing partial (plan_rowwise); the output keeps
// it. Backward gives dx in that layout and the gain and bias gradients as
// sums over this rank's rows: partial (sum) over the axes that shard the
// rows, so that the caller's move to the parameters' layout reduces them.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/layer_norm.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/softmax.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace shardmesh::ops {

// What backward needs: the input as normalised, each row's mean and 1/std.
template <class T, std::size_t Rank, class MemorySpace>
struct layer_norm_saved {
  dynamic_dtensor<T, Rank, MemorySpace> x;
  Kokkos::View<T*, MemorySpace> mean, rstd;
};

template <class T, std::size_t Rank, class MemorySpace>
struct layer_norm_forward_result {
  dynamic_dtensor<T, Rank, MemorySpace> y;
  layer_norm_saved<T, Rank, MemorySpace> saved;
};

template <class T, std::size_t Rank, class MemorySpace>
struct layer_norm_gradients {
  dynamic_dtensor<T, Rank, MemorySpace> dx;
  dynamic_dtensor<T, 1, MemorySpace> dgamma, dbeta;
};

namespace detail {

// gamma or beta whole on every rank.
template <class T, class MemorySpace>
dynamic_dtensor<T, 1, MemorySpace> whole(dynamic_dtensor<T, 1, MemorySpace> const& v,
                                         execution_space_of<MemorySpace> const& exec) {
  bound_layout r;
  r.rank = 1;
  return to_layout(v, r, exec);
}

}  // namespace detail

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] layer_norm_forward_result<T, Rank, MemorySpace> layer_norm(
    dynamic_dtensor<T, Rank, MemorySpace> const& x, dynamic_dtensor<T, 1, MemorySpace> const& gamma,
    dynamic_dtensor<T, 1, MemorySpace> const& beta, T eps, execution_space_of<MemorySpace> const& exec = {}) {
  std::size_t const n = x.global_extents()[Rank - 1];
  if (gamma.global_extents()[0] != n || beta.global_extents()[0] != n)
    throw mismatched_tensor_error("layer_norm: " + gamma.notation() + " and " + beta.notation() + " do not fit " +
                                  x.notation());
  detail::require_same_mesh("layer_norm", x, gamma);
  auto const in = detail::whole_rows(x, exec);
  auto const g = detail::whole(gamma, exec);
  auto const b = detail::whole(beta, exec);
  auto y = detail::make_like<T, Rank, MemorySpace>(in.mesh(), in.bound(), in.global_extents());
  auto const rows = detail::rows_of(in.local());
  auto const mean = detail::pooled<Kokkos::View<T*, MemorySpace>>(in.mesh(), tensor_index{rows.extent(0)});
  auto const rstd = detail::pooled<Kokkos::View<T*, MemorySpace>>(in.mesh(), tensor_index{rows.extent(0)});
  local::layer_norm_forward(exec, rows, g.local(), b.local(), eps, detail::rows_of(y.local()), mean, rstd);
  return {y, {in, mean, rstd}};
}

namespace detail {

template <class T, std::size_t Rank, class MemorySpace>
layer_norm_gradients<T, Rank, MemorySpace> layer_norm_backward(layer_norm_saved<T, Rank, MemorySpace> const& saved,
                                                               dynamic_dtensor<T, 1, MemorySpace> const& gamma,
                                                               dynamic_dtensor<T, Rank, MemorySpace> const& dy,
                                                               dynamic_dtensor<T, Rank, MemorySpace> const* residual,
                                                               execution_space_of<MemorySpace> const& exec) {
  auto const& x = saved.x;
  if (residual != nullptr) {  // checked before anything moves
    require_same_mesh("layer_norm_backward", x, *residual);
    if (residual->global_extents() != x.global_extents())
      throw mismatched_tensor_error("layer_norm_backward: the residual " + residual->notation() + " does not fit " +
                                    x.notation());
  }
  std::size_t const n = x.global_extents()[Rank - 1];
  auto const g = whole(gamma, exec);
  auto const d = to_layout(dy, x.bound(), exec);
  auto dx = make_like<T, Rank, MemorySpace>(x.mesh(), x.bound(), x.global_extents());
  // The gain and bias gradients sum over rows: partial on the axes sharding them.
  bound_layout params;
  params.rank = 1;
  params.partial_axes = sharding_axes(x.bound());
  tensor_index const extent{n};
  auto dgamma = make_like<T, 1, MemorySpace>(x.mesh(), params, extent);
  auto dbeta = make_like<T, 1, MemorySpace>(x.mesh(), params, extent);
  auto const rows = [](auto const& t) { return rows_of(t.local()); };
  if (residual == nullptr) {
    local::layer_norm_backward(exec, rows(x), g.local(), saved.mean, saved.rstd, rows(d), rows(dx), dgamma.local(),
                               dbeta.local());
  } else {
    auto const r = to_layout(*residual, x.bound(), exec);
    local::layer_norm_backward(exec, rows(x), g.local(), saved.mean, saved.rstd, rows(d), rows(dx), dgamma.local(),
                               dbeta.local(), rows(r));
  }
  return {dx, dgamma, dbeta};
}

}  // namespace detail

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] layer_norm_gradients<T, Rank, MemorySpace> layer_norm_backward(
    layer_norm_saved<T, Rank, MemorySpace> const& saved, dynamic_dtensor<T, 1, MemorySpace> const& gamma,
    dynamic_dtensor<T, Rank, MemorySpace> const& dy, execution_space_of<MemorySpace> const& exec = {}) {
  return detail::layer_norm_backward(saved, gamma, dy,
                                     static_cast<dynamic_dtensor<T, Rank, MemorySpace> const*>(nullptr), exec);
}

// The same with dx plus residual, in one pass: the gradient reaching x of a
// residual branch x + f(layer_norm(x)), with residual the gradient of the
// branch's output. The residual is moved to dx's layout if it is not in it.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] layer_norm_gradients<T, Rank, MemorySpace> layer_norm_backward(
    layer_norm_saved<T, Rank, MemorySpace> const& saved, dynamic_dtensor<T, 1, MemorySpace> const& gamma,
    dynamic_dtensor<T, Rank, MemorySpace> const& dy, dynamic_dtensor<T, Rank, MemorySpace> const& residual,
    execution_space_of<MemorySpace> const& exec = {}) {
  return detail::layer_norm_backward(saved, gamma, dy, &residual, exec);
}

}  // namespace shardmesh::ops
