#pragma once
// Softmax of a dtensor along its last dimension, optionally causal over the
// last two ([..., queries, keys]). A row-wise op: the last dimension must be
// whole on every rank and nothing partial, so the input is first moved to
// the cheapest layout that has it so (algebra/propagation.hpp, plan_rowwise);
// the result and the gradient keep that layout.

#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/local/softmax.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace shardmesh::ops {

namespace detail {

// x moved to the layout a row-wise op along the last dimension runs on.
template <class T, std::size_t Rank, class MemorySpace>
dynamic_dtensor<T, Rank, MemorySpace> whole_rows(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                 execution_space_of<MemorySpace> const& exec) {
  mesh_shape const& mesh = x.mesh().shape();
  std::string key = "rowwise";
  add_to_key(key, mesh, x.bound(), extents_of(x));
  op_layouts const& plan = planned(
      x.mesh(), key, [&] { return plan_rowwise(mesh, x.bound(), Rank - 1, extents_of(x), compute_model(x.mesh())); });
  return to_layout(x, plan.a, exec);
}

// The causal mask of x's shard: its query rows are a block of dimension Rank - 2.
template <class T, std::size_t Rank, class MemorySpace>
local::causal_mask causal_mask_of(dynamic_dtensor<T, Rank, MemorySpace> const& x) {
  static_assert(Rank >= 2, "softmax: a causal mask needs [..., queries, keys]");
  bound_dim const queries = x.bound().dims[Rank - 2];
  if (queries.dist != distribution::block)
    throw invalid_layout_error("softmax: a causal mask needs the queries of " + x.notation() + " in blocks");
  interval const rows = block_interval(x.mesh().shape(), queries, x.global_extents()[Rank - 2], x.mesh().coordinates());
  return {rows.size() == 0 ? 1 : rows.size(), rows.begin, 0};
}

}  // namespace detail

enum class masking : unsigned char { none, causal };

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> softmax(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                            masking mask = masking::none,
                                                            execution_space_of<MemorySpace> const& exec = {}) {
  require_held("softmax", x);
  auto const in = detail::whole_rows(x, exec);
  auto y = detail::make_like<T, Rank, MemorySpace>(in.mesh(), in.bound(), in.global_extents());
  std::optional<local::causal_mask> m;
  if (mask == masking::causal) m = detail::causal_mask_of(in);
  local::softmax_forward(exec, detail::rows_of(in.local()), detail::rows_of(y.local()), m);
  return y;
}

// dx = y * (dy - sum(dy * y)) along the last dimension, in y's layout.
template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> softmax_backward(dynamic_dtensor<T, Rank, MemorySpace> const& y,
                                                                     dynamic_dtensor<T, Rank, MemorySpace> const& dy,
                                                                     execution_space_of<MemorySpace> const& exec = {}) {
  require_held("softmax_backward", y, dy);
  detail::require_same_mesh("softmax_backward", y, dy);
  auto const g = detail::to_layout(dy, y.bound(), exec);
  auto dx = detail::make_like<T, Rank, MemorySpace>(y.mesh(), y.bound(), y.global_extents());
  local::softmax_backward(exec, detail::rows_of(y.local()), detail::rows_of(g.local()), detail::rows_of(dx.local()));
  return dx;
}

}  // namespace shardmesh::ops
