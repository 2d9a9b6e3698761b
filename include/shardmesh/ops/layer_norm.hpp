#pragma once
// Layer norm of a dtensor over its last dimension, with gain and bias
// vectors. A row-wise op: the input is moved to the cheapest layout with the
// last dimension whole and nothing partial (plan_rowwise); the output keeps
// it. Backward gives dx in that layout and the gain and bias gradients as
// sums over this rank's rows: partial (sum) over the axes that shard the
// rows, so that the caller's move to the parameters' layout reduces them.
// rms_norm and rms_norm_backward are the same for an RMS norm (a gain, no
// bias, no centring: ops/local/layer_norm.hpp).

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/layer_norm.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/softmax.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <type_traits>

namespace shardmesh::ops {

// What backward needs: the input as normalised, each row's mean (a layer
// norm's; an RMS norm has none) and 1/std, in accumulation_t<T>.
template <class T, std::size_t Rank, class MemorySpace>
struct layer_norm_saved {
  dynamic_dtensor<T, Rank, MemorySpace> x;
  Kokkos::View<accumulation_t<T>*, MemorySpace> mean, rstd;
  bool centred = true;
};

template <class T, std::size_t Rank, class MemorySpace>
struct layer_norm_forward_result {
  dynamic_dtensor<T, Rank, MemorySpace> y;
  layer_norm_saved<T, Rank, MemorySpace> saved;
};

template <class T, std::size_t Rank, class MemorySpace>
struct layer_norm_gradients {
  dynamic_dtensor<T, Rank, MemorySpace> dx;
  dynamic_dtensor<T, 1, MemorySpace> dgamma, dbeta;  // no dbeta for an RMS norm
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

namespace detail {

// A layer norm (beta given) or an RMS norm (beta null).
template <class T, std::size_t Rank, class MemorySpace>
layer_norm_forward_result<T, Rank, MemorySpace> normalize(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                          dynamic_dtensor<T, 1, MemorySpace> const& gamma,
                                                          dynamic_dtensor<T, 1, MemorySpace> const* beta,
                                                          accumulation_t<T> eps,
                                                          execution_space_of<MemorySpace> const& exec) {
  char const* const op = beta != nullptr ? "layer_norm" : "rms_norm";
  require_held(op, x, gamma);
  if (beta != nullptr) require_held(op, *beta);
  std::size_t const n = x.global_extents()[Rank - 1];
  if (gamma.global_extents()[0] != n || (beta != nullptr && beta->global_extents()[0] != n))
    throw mismatched_tensor_error(std::string(op) + ": " + gamma.notation() +
                                  (beta != nullptr ? " and " + beta->notation() : std::string()) + " do not fit " +
                                  x.notation());
  require_same_mesh(op, x, gamma);
  auto const in = whole_rows(x, exec);
  auto const g = whole(gamma, exec);
  auto y = make_like<T, Rank, MemorySpace>(in.mesh(), in.bound(), in.global_extents());
  auto const rows = rows_of(in.local());
  using vector = Kokkos::View<accumulation_t<T>*, MemorySpace>;
  auto const rstd = pooled<vector>(in.mesh(), tensor_index{rows.extent(0)});
  if (beta == nullptr) {
    local::rms_norm_forward(exec, rows, g.local(), eps, rows_of(y.local()), rstd);
    return {y, {in, vector(), rstd, false}};
  }
  auto const b = whole(*beta, exec);
  auto const mean = pooled<vector>(in.mesh(), tensor_index{rows.extent(0)});
  local::layer_norm_forward(exec, rows, g.local(), b.local(), eps, rows_of(y.local()), mean, rstd);
  return {y, {in, mean, rstd, true}};
}

}  // namespace detail

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] layer_norm_forward_result<T, Rank, MemorySpace> layer_norm(
    dynamic_dtensor<T, Rank, MemorySpace> const& x, dynamic_dtensor<T, 1, MemorySpace> const& gamma,
    dynamic_dtensor<T, 1, MemorySpace> const& beta, std::type_identity_t<accumulation_t<T>> eps,
    execution_space_of<MemorySpace> const& exec = {}) {
  return detail::normalize(x, gamma, &beta, eps, exec);
}

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] layer_norm_forward_result<T, Rank, MemorySpace> rms_norm(
    dynamic_dtensor<T, Rank, MemorySpace> const& x, dynamic_dtensor<T, 1, MemorySpace> const& gamma,
    std::type_identity_t<accumulation_t<T>> eps, execution_space_of<MemorySpace> const& exec = {}) {
  return detail::normalize(x, gamma, static_cast<dynamic_dtensor<T, 1, MemorySpace> const*>(nullptr), eps, exec);
}

namespace detail {

template <class T, std::size_t Rank, class MemorySpace>
layer_norm_gradients<T, Rank, MemorySpace> layer_norm_backward(layer_norm_saved<T, Rank, MemorySpace> const& saved,
                                                               dynamic_dtensor<T, 1, MemorySpace> const& gamma,
                                                               dynamic_dtensor<T, Rank, MemorySpace> const& dy,
                                                               dynamic_dtensor<T, Rank, MemorySpace> const* residual,
                                                               execution_space_of<MemorySpace> const& exec) {
  auto const& x = saved.x;
  require_held("layer_norm_backward", x, gamma, dy);
  if (residual != nullptr) require_held("layer_norm_backward", *residual);
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
  auto const rows = [](auto const& t) { return rows_of(t.local()); };
  if (!saved.centred) {
    auto const r = residual != nullptr ? to_layout(*residual, x.bound(), exec) : dx;
    local::rms_norm_backward(exec, rows(x), g.local(), saved.rstd, rows(d), rows(dx), dgamma.local(), rows(r),
                             residual != nullptr);
    return {dx, dgamma, {}};
  }
  auto dbeta = make_like<T, 1, MemorySpace>(x.mesh(), params, extent);
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

// The gradients of a layer norm or an RMS norm (the saved state says which).
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
