#pragma once
// Exactly how many elements each rank receives in each step of a plan, for
// given global extents (even or not): what the runtime's counters must show
// and the reference simulator must reproduce. Closed forms per step; the only
// loops are over one dimension's indices for cyclic dimensions.
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/algebra/validation.hpp"

#include <cstddef>
#include <vector>

namespace shardmesh {

namespace detail {

// Number of global indices of one dimension held both under `a` at
// coordinates ca and under `b` at coordinates cb.
[[nodiscard]] constexpr std::size_t dim_overlap(mesh_shape const& mesh, bound_dim const& a, mesh_coordinates const& ca,
                                                bound_dim const& b, mesh_coordinates const& cb, std::size_t extent) {
  if (a.dist == distribution::block && b.dist == distribution::block) {
    interval const x = block_interval(mesh, a, extent, ca);
    interval const y = block_interval(mesh, b, extent, cb);
    std::size_t const begin = x.begin > y.begin ? x.begin : y.begin;
    std::size_t const end = x.end < y.end ? x.end : y.end;
    return end > begin ? end - begin : 0;
  }
  std::size_t count = 0;
  std::size_t const n = local_extent(mesh, a, extent, ca);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t const g = to_global(mesh, a, extent, ca, i);
    count += holds_index(b, locate(mesh, b, extent, g), cb) ? 1U : 0U;
  }
  return count;
}

// Elements held both by rank ra under layout a and by rank rb under layout b.
[[nodiscard]] constexpr std::size_t overlap(mesh_shape const& mesh, bound_layout const& a, std::size_t ra,
                                            bound_layout const& b, std::size_t rb, tensor_index const& global) {
  mesh_coordinates const ca = coordinates_of(mesh, ra);
  mesh_coordinates const cb = coordinates_of(mesh, rb);
  std::size_t n = 1;
  for (std::size_t d = 0; d < a.rank; ++d) n *= dim_overlap(mesh, a.dims[d], ca, b.dims[d], cb, global[d]);
  return n;
}

}  // namespace detail

[[nodiscard]] constexpr std::size_t local_size(mesh_shape const& mesh, bound_layout const& l,
                                               tensor_index const& global, std::size_t rank) {
  tensor_index const e = local_extents(mesh, l, global, rank);
  std::size_t n = 1;
  for (std::size_t d = 0; d < l.rank; ++d) n *= e[d];
  return n;
}

// Elements `rank` receives in step s. All-reduce is reduce-scatter of the
// local buffer in n blocks then all-gather of the reduced blocks.
[[nodiscard]] constexpr std::size_t received(mesh_shape const& mesh, plan_step const& s, tensor_index const& global,
                                             std::size_t rank) {
  std::size_t const n = group_size(mesh, s.axes);
  std::size_t const after = local_size(mesh, s.after, global, rank);
  switch (s.kind) {
    case step_kind::slice:
    case step_kind::to_partial: return 0;
    case step_kind::all_gather:
    case step_kind::all_to_all:
    case step_kind::all_to_all_v: return after - detail::overlap(mesh, s.after, rank, s.before, rank, global);
    case step_kind::reduce_scatter: return (n - 1) * after;
    case step_kind::all_reduce: {
      std::size_t const own = block_part(after, n, group_position(mesh, s.axes, rank)).size();
      return (n - 1) * own + (after - own);
    }
    case step_kind::permute: return permutation_source(mesh, s.axes, rank) == rank ? 0 : after;
  }
  return 0;
}

// Elements each rank receives over the whole plan.
[[nodiscard]] constexpr std::vector<std::size_t> received(mesh_shape const& mesh, redistribution_plan const& plan,
                                                          tensor_index const& global) {
  std::vector<std::size_t> total(mesh.size(), 0);
  for (std::size_t i = 0; i < plan.size(); ++i)
    for (std::size_t r = 0; r < mesh.size(); ++r) total[r] += received(mesh, plan[i], global, r);
  return total;
}

// Bytes per element of T that a step of this kind moves: sizeof(T), except
// that reductions of 16-bit floats move them widened to float
// (comm/reduced_precision.hpp).
template <class T>
[[nodiscard]] constexpr std::size_t wire_bytes(step_kind kind) {
  bool const reduces = kind == step_kind::all_reduce || kind == step_kind::reduce_scatter;
  return float16_element<T> && reduces ? sizeof(float) : sizeof(T);
}

// Bytes each rank receives over the whole plan, for elements of T: what the
// runtime's counters record.
template <class T>
[[nodiscard]] constexpr std::vector<std::size_t> received_bytes(mesh_shape const& mesh, redistribution_plan const& plan,
                                                                tensor_index const& global) {
  std::vector<std::size_t> total(mesh.size(), 0);
  for (std::size_t i = 0; i < plan.size(); ++i)
    for (std::size_t r = 0; r < mesh.size(); ++r)
      total[r] += received(mesh, plan[i], global, r) * wire_bytes<T>(plan[i].kind);
  return total;
}

// The least the busiest rank must receive, in elements, to take a tensor of
// these extents from `from` to `to` by any sequence of transfers (both
// normalised on the mesh):
//  - without a reduction, the elements of its target shard it does not hold;
//  - reducing g addends into k copies takes g-1 transfers per value and one
//    more per further copy, spread over all ranks at best, and every rank
//    receives at least one element per element of its target shard.
// A rank holds real values under `to` unless `to` is partial on an axis
// `from` is not and its coordinate there is not 0 (to_partial).
[[nodiscard]] constexpr std::size_t transition_lower_bound(mesh_shape const& mesh, bound_layout const& from,
                                                           bound_layout const& to, tensor_index const& global) {
  axis_set const reduced = from.partial_axes - to.partial_axes;
  axis_set const fresh = to.partial_axes - from.partial_axes;
  std::size_t bound = 0;
  std::size_t outputs = 0;  // elements of all target shards that hold real values
  for (std::size_t rank = 0; rank < mesh.size(); ++rank) {
    if (group_position(mesh, fresh, rank) != 0) continue;
    std::size_t const out = local_size(mesh, to, global, rank);
    outputs += out;
    std::size_t const needed = reduced.empty() ? out - detail::overlap(mesh, to, rank, from, rank, global) : out;
    bound = needed > bound ? needed : bound;
  }
  if (reduced.empty()) return bound;
  // Every element has `values` distinct reduced values (one per coordinate
  // on the partial axes that stay), each merged from g addends.
  std::size_t elements = 1;
  for (std::size_t d = 0; d < to.rank; ++d) elements *= global[d];
  std::size_t const g = group_size(mesh, reduced);
  std::size_t const values = elements * group_size(mesh, from.partial_axes & to.partial_axes);
  std::size_t const transfers = values * (g - 1) + (outputs - values);
  std::size_t const spread = (transfers + mesh.size() - 1) / mesh.size();
  return spread > bound ? spread : bound;
}

}  // namespace shardmesh
