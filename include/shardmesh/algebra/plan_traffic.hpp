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

}  // namespace shardmesh
