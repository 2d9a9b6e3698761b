#pragma once
// Ops on attention heads [batch, sequence, heads, head size]:
//
//   rotary(x, base)            rotary position embedding of each head
//                              (ops/local/rotary.hpp), rotary_backward its
//                              transpose; partial sums stay partial (the
//                              rotation is linear)
//   expand_heads(kv, l, h)     grouped-query attention: the h query heads'
//                              key/value heads in layout l, from kv's fewer
//                              heads (ops/local/head_groups.hpp)
//   reduce_heads(g, l, kv)     its transpose: each key/value head's gradient
//                              summed over its query heads, in layout l,
//                              partial over the axes that split a group
//
// rotary needs the sequence and the head size whole (moved there if not),
// or, given a sequence_split, keeps a sequence split on its axis alone and
// reads each token's position from the split's order;
// the head ops move their input to the output's placement outside the
// heads, and need the key/value heads a rank's query heads read to be
// local: shared ones replicated, or split so that groups stay whole.

#include "shardmesh/algebra/sequence_chunks.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/head_groups.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/ops/local/rotary.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace shardmesh::ops {

template <class T, class MemorySpace>
using heads_tensor = dynamic_dtensor<T, 4, MemorySpace>;

// A sequence split on a mesh axis in an order (algebra/sequence_chunks.hpp):
// where rotary reads each token's position when it keeps the split.
struct sequence_split {
  std::string_view axis = "cp";
  sequence_order order = sequence_order::balanced;
};

namespace detail {

template <class T, class MemorySpace>
heads_tensor<T, MemorySpace> rotate(heads_tensor<T, MemorySpace> const& x, double base, bool inverse,
                                    std::optional<sequence_split> const& split,
                                    execution_space_of<MemorySpace> const& exec) {
  std::size_t const d = x.global_extents()[3];
  if (d % 2 != 0 || !(base > 1))
    throw invalid_option_error("rotary: heads of size " + std::to_string(d) + " and base " + std::to_string(base) +
                               "; the head size must be even and the base above 1");
  mesh_shape const& mesh = x.mesh().shape();
  std::size_t const axis = split ? mesh.find(split->axis) : npos;
  bound_layout l = x.bound();
  bound_dim const& sequence = l.dims[1];
  bool const keeps_split = axis != npos && sequence.count == 1 && sequence.axes[0] == axis &&
                           sequence.dist == distribution::block &&
                           x.global_extents()[1] % sequence_pieces(mesh.extent(axis), split->order) == 0;
  if (!keeps_split) l.dims[1] = bound_dim{};
  l.dims[3] = bound_dim{};
  auto const in = to_layout(x, l, exec);
  auto out = make_like<T, 4, MemorySpace>(x.mesh(), l, x.global_extents());
  auto const& local = in.local();
  local::rotary_positions positions{local.extent(2), local.extent(1), 0};
  if (keeps_split) {  // this rank's one or two runs of positions
    auto const runs = rank_chunks(x.global_extents()[1], mesh.extent(axis), x.mesh().coordinates()[axis], split->order);
    positions.first = runs.front().position;
    if (runs.size() > 1) positions.split = runs.back().begin, positions.second = runs.back().position;
  }
  local::rotary(exec, rows_of(local), rows_of(out.local()), positions, base, inverse);
  return out;
}

// The heads of a tensor of `heads` heads in layout l that coordinates c hold.
inline interval held_heads(char const* op, mesh_shape const& mesh, bound_layout const& l, std::size_t heads,
                           mesh_coordinates const& c) {
  if (l.dims[2].dist != distribution::block)
    throw invalid_layout_error(std::string(op) + ": " + std::string(to_string(unbind(mesh, l)).view()) +
                               " splits the heads cyclically");
  return block_interval(mesh, l.dims[2], heads, c);
}

// Query heads of extents q over key/value heads of extents kv, or the same error on every rank.
inline void check_groups(char const* op, tensor_index const& q, tensor_index const& kv) {
  if (kv[2] == 0 || q[2] % kv[2] != 0)
    throw mismatched_tensor_error(std::string(op) + ": " + std::to_string(kv[2]) + " key/value heads do not divide " +
                                  std::to_string(q[2]) + " query heads");
  for (std::size_t d : {std::size_t{0}, std::size_t{1}, std::size_t{3}})
    if (q[d] != kv[d])
      throw mismatched_tensor_error(std::string(op) + ": query and key/value heads differ in dimension " +
                                    std::to_string(d) + " (" + std::to_string(q[d]) + " and " + std::to_string(kv[d]) +
                                    ")");
}

// The grouping of query heads `queries` over key/value heads `shared`,
// checked on every rank's coordinates to read local key/value heads only
// (the same answer on every rank).
template <class T, class MemorySpace>
local::head_groups grouping(char const* op, heads_tensor<T, MemorySpace> const& queries,
                            heads_tensor<T, MemorySpace> const& shared) {
  mesh_shape const& mesh = queries.mesh().shape();
  std::size_t const h = queries.global_extents()[2], kv = shared.global_extents()[2], group = h / kv;
  for (std::size_t r = 0; r < mesh.size(); ++r) {
    mesh_coordinates const c = coordinates_of(mesh, r);
    interval const q = held_heads(op, mesh, queries.bound(), h, c), s = held_heads(op, mesh, shared.bound(), kv, c);
    if (q.size() != 0 && (q.begin / group < s.begin || (q.end - 1) / group >= s.end))
      throw invalid_layout_error(std::string(op) + ": the query heads of " + queries.notation() +
                                 " read key/value heads of " + shared.notation() + " that other ranks hold");
  }
  mesh_coordinates const here = queries.mesh().coordinates();
  return {group, held_heads(op, mesh, queries.bound(), h, here).begin,
          held_heads(op, mesh, shared.bound(), kv, here).begin};
}

// x moved to the placement of `like` outside the heads (dimensions 0, 1 and 3), its heads as they are.
template <class T, class MemorySpace>
heads_tensor<T, MemorySpace> placed_like(heads_tensor<T, MemorySpace> const& x, bound_layout const& like,
                                         execution_space_of<MemorySpace> const& exec) {
  bound_layout l = like;
  l.dims[2] = x.bound().dims[2];
  l.partial_axes = x.bound().partial_axes;
  l.op = x.bound().op;
  return to_layout(x, l, exec);
}

template <class View>
auto as_heads(View const& v) {
  return local::reshaped_view<View, 3>(v.data(), v.extent(0) * v.extent(1), v.extent(2), v.extent(3));
}

}  // namespace detail

template <class T, class MemorySpace>
[[nodiscard]] heads_tensor<T, MemorySpace> rotary(heads_tensor<T, MemorySpace> const& x, double base,
                                                  execution_space_of<MemorySpace> const& exec = {},
                                                  std::optional<sequence_split> const& split = {}) {
  require_held("rotary", x);
  return detail::rotate(x, base, false, split, exec);
}

template <class T, class MemorySpace>
[[nodiscard]] heads_tensor<T, MemorySpace> rotary_backward(heads_tensor<T, MemorySpace> const& dy, double base,
                                                           execution_space_of<MemorySpace> const& exec = {},
                                                           std::optional<sequence_split> const& split = {}) {
  require_held("rotary_backward", dy);
  return detail::rotate(dy, base, true, split, exec);
}

template <class T, class MemorySpace>
[[nodiscard]] heads_tensor<T, MemorySpace> expand_heads(heads_tensor<T, MemorySpace> const& shared,
                                                        bound_layout const& out, std::size_t heads,
                                                        execution_space_of<MemorySpace> const& exec = {}) {
  require_held("expand_heads", shared);
  tensor_index global = shared.global_extents();
  global[2] = heads;
  detail::check_groups("expand_heads", global, shared.global_extents());
  auto y = detail::make_like<T, 4, MemorySpace>(shared.mesh(), out, global);
  auto const in = detail::placed_like(shared, out, exec);
  local::head_groups const g = detail::grouping("expand_heads", y, in);
  local::expand_heads(exec, detail::as_heads(in.local()), detail::as_heads(y.local()), g);
  return y;
}

// grad's layout with the heads split by axes that `out` does not split: the
// result is partial over those axes.
template <class T, class MemorySpace>
[[nodiscard]] heads_tensor<T, MemorySpace> reduce_heads(heads_tensor<T, MemorySpace> const& grad, bound_layout out,
                                                        std::size_t shared_heads,
                                                        execution_space_of<MemorySpace> const& exec = {}) {
  require_held("reduce_heads", grad);
  if (!grad.bound().partial_axes.empty())
    throw invalid_layout_error("reduce_heads: " + grad.notation() + " is partial");
  tensor_index global = grad.global_extents();
  global[2] = shared_heads;
  detail::check_groups("reduce_heads", grad.global_extents(), global);
  auto const in = detail::placed_like(grad, out, exec);
  bound_dim const split = in.bound().dims[2];
  for (std::size_t i = 0; i < split.count; ++i) {
    bool kept = false;
    for (std::size_t j = 0; j < out.dims[2].count; ++j) kept = kept || out.dims[2].axes[j] == split.axes[i];
    if (!kept) out.partial_axes.insert(split.axes[i]);
  }
  auto y = detail::make_like<T, 4, MemorySpace>(grad.mesh(), out, global);
  local::head_groups const g = detail::grouping("reduce_heads", in, y);
  local::reduce_heads(exec, detail::as_heads(in.local()), detail::as_heads(y.local()), g);
  return y;
}

}  // namespace shardmesh::ops
