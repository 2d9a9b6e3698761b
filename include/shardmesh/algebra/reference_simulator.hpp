#pragma once
// A reference for redistribution, in one process: cut a global array into
// every simulated rank's shard, execute a plan step by step with each step's
// exact semantics (reductions included), and count the elements every rank
// sends and receives. Element by element and slow on purpose: it is the
// serial reference the planner and the runtime are checked against.
// Not part of the umbrella header: include it in tests. Its names live in
// shardmesh::reference. No Kokkos or MPI.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardmesh::reference {

// Every rank's local shard of a tensor, each row-major in its local extents.
struct simulated_tensor {
  mesh_shape mesh;
  bound_layout layout;
  tensor_index global{};
  std::vector<std::vector<double>> shards;  // by rank
};

struct simulated_traffic {
  std::vector<std::size_t> sent;      // elements, by rank
  std::vector<std::size_t> received;  // elements, by rank
};

namespace detail {

// Calls visit(local_flat, global_index) for every element rank holds under l.
template <class Visit>
void for_each_local(mesh_shape const& mesh, bound_layout const& l, tensor_index const& global, std::size_t rank,
                    Visit&& visit) {
  tensor_index const extents = local_extents(mesh, l, global, rank);
  std::size_t size = 1;
  for (std::size_t d = 0; d < l.rank; ++d) size *= extents[d];
  tensor_index local{};
  for (std::size_t flat = 0; flat < size; ++flat) {
    std::size_t rest = flat;
    for (std::size_t d = l.rank; d-- > 0;) {
      local[d] = rest % extents[d];
      rest /= extents[d];
    }
    visit(flat, local_to_global(mesh, l, global, rank, local));
  }
}

inline std::size_t flat_index(tensor_index const& extents, tensor_index const& index, std::size_t rank) {
  std::size_t flat = 0;
  for (std::size_t d = 0; d < rank; ++d) flat = flat * extents[d] + index[d];
  return flat;
}

inline double identity(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return 0;
    case reduce_op::prod: return 1;
    case reduce_op::max: return -std::numeric_limits<double>::infinity();
    case reduce_op::min: return std::numeric_limits<double>::infinity();
  }
  return 0;
}

inline double combine(reduce_op op, double a, double b) {
  switch (op) {
    case reduce_op::sum: return a + b;
    case reduce_op::prod: return a * b;
    case reduce_op::max: return std::max(a, b);
    case reduce_op::min: return std::min(a, b);
  }
  return a;
}

// Ranks that differ from rank only on the axes of mask, in group order.
inline std::vector<std::size_t> group_of(mesh_shape const& mesh, axis_set axes, std::size_t rank) {
  std::vector<std::size_t> members(group_size(mesh, axes));
  for (std::size_t i = 0; i < members.size(); ++i) members[i] = group_member(mesh, axes, rank, i);
  return members;
}

// A contribution of one partial coordinate k (of `count`) to value v, such
// that combining all contributions with op gives v exactly (small integers).
inline double contribution(reduce_op op, double v, std::size_t k, std::size_t count, std::size_t g) {
  auto const noise = [&](std::size_t j) { return static_cast<double>((g * 7 + j * 13) % 5) + 1; };
  switch (op) {
    case reduce_op::sum: {
      if (k != 0) return noise(k) - 3;
      double rest = v;
      for (std::size_t j = 1; j < count; ++j) rest -= noise(j) - 3;
      return rest;
    }
    case reduce_op::prod: {
      auto const sign = [&](std::size_t j) { return noise(j) > 3 ? -1.0 : 1.0; };
      if (k != 0) return sign(k);
      double rest = v;
      for (std::size_t j = 1; j < count; ++j) rest *= sign(j);
      return rest;
    }
    case reduce_op::max: return k == 0 ? v : v - noise(k);
    case reduce_op::min: return k == 0 ? v : v + noise(k);
  }
  return v;
}

}  // namespace detail

// Each rank's shard of `values` (row-major, extents `global`) under l. If l
// is partial, the ranks' contributions combine with l's op to the values,
// and differ between partial coordinates.
inline simulated_tensor cut(mesh_shape const& mesh, bound_layout const& l, tensor_index const& global,
                            std::vector<double> const& values) {
  simulated_tensor t{mesh, l, global, std::vector<std::vector<double>>(mesh.size())};
  std::size_t const partial_count = group_size(mesh, l.partial_axes);
  for (std::size_t r = 0; r < mesh.size(); ++r) {
    t.shards[r].resize(local_size(mesh, l, global, r));
    std::size_t const k = group_position(mesh, l.partial_axes, r);
    detail::for_each_local(mesh, l, global, r, [&](std::size_t local, tensor_index const& g) {
      std::size_t const flat = detail::flat_index(global, g, l.rank);
      double const v = values[flat];
      t.shards[r][local] = l.partial_axes.empty() ? v : detail::contribution(l.op, v, k, partial_count, flat);
    });
  }
  return t;
}

// The values a partial tensor stands for, reduced over its partial axes, as
// shards of its layout without them. A tensor that is not partial is returned as is.
inline simulated_tensor reduced(simulated_tensor const& t) {
  simulated_tensor out = t;
  out.layout.partial_axes = {};
  out.layout.op = reduce_op::sum;
  for (std::size_t r = 0; r < t.mesh.size(); ++r) {
    std::vector<double>& shard = out.shards[r];
    std::fill(shard.begin(), shard.end(), detail::identity(t.layout.op));
    for (std::size_t q : detail::group_of(t.mesh, t.layout.partial_axes, r))
      for (std::size_t i = 0; i < shard.size(); ++i) shard[i] = detail::combine(t.layout.op, shard[i], t.shards[q][i]);
  }
  return out;
}

namespace detail {

// Slice, all-gather and all-to-all: each element of r's new shard from r
// itself if it holds it, else from the group member that does (the one that
// differs from r only on group axes).
inline void simulate_moves(plan_step const& s, simulated_tensor const& t, std::size_t r, std::vector<double>& next,
                           simulated_traffic& traffic) {
  mesh_shape const& mesh = t.mesh;
  mesh_coordinates const c = coordinates_of(mesh, r);
  detail::for_each_local(mesh, s.after, t.global, r, [&](std::size_t local, tensor_index const& g) {
    mesh_coordinates holder = c;
    tensor_index at{};
    for (std::size_t d = 0; d < s.before.rank; ++d) {
      dim_location const where = locate(mesh, s.before.dims[d], t.global[d], g[d]);
      holder = moved_to_index(s.before.dims[d], where, holder);
      at[d] = where.local;
    }
    for (std::size_t a = 0; a < mesh.ndim; ++a)
      if (holder[a] != c[a] && !s.axes.contains(a))
        throw std::logic_error("simulate: " + std::string(to_string(mesh, s).view()) +
                               " needs data from outside its group");
    std::size_t const q = rank_of(mesh, holder);
    tensor_index const held = local_extents(mesh, s.before, t.global, q);
    next[local] = t.shards[q][detail::flat_index(held, at, s.before.rank)];
    if (q != r) {
      ++traffic.received[r];
      ++traffic.sent[q];
    }
  });
}

// Every member holds r's new shard within its (larger) old one.
inline void simulate_reduce_scatter(plan_step const& s, simulated_tensor const& t, std::size_t r,
                                    std::vector<std::size_t> const& members, std::vector<double>& next,
                                    simulated_traffic& traffic) {
  mesh_shape const& mesh = t.mesh;
  std::size_t const n = members.size();
  tensor_index const old = local_extents(mesh, s.before, t.global, r);
  std::fill(next.begin(), next.end(), detail::identity(s.before.op));
  detail::for_each_local(mesh, s.after, t.global, r, [&](std::size_t local, tensor_index const& g) {
    tensor_index at{};
    for (std::size_t d = 0; d < s.before.rank; ++d) at[d] = locate(mesh, s.before.dims[d], t.global[d], g[d]).local;
    for (std::size_t q : members)
      next[local] = detail::combine(s.before.op, next[local], t.shards[q][detail::flat_index(old, at, s.before.rank)]);
  });
  traffic.received[r] += (n - 1) * next.size();
  for (std::size_t q : members)
    if (q != r) traffic.sent[q] += next.size();
}

}  // namespace detail

// Executes one step in place and adds its traffic. Throws std::logic_error
// if the step asks a rank for data no rank of its group holds.
inline void simulate(plan_step const& s, simulated_tensor& t, simulated_traffic& traffic) {
  mesh_shape const& mesh = t.mesh;
  std::vector<std::vector<double>> next(mesh.size());
  std::size_t const n = group_size(mesh, s.axes);
  for (std::size_t r = 0; r < mesh.size(); ++r) {
    next[r].assign(local_size(mesh, s.after, t.global, r), 0.0);
    auto const members = detail::group_of(mesh, s.axes, r);
    switch (s.kind) {
      case step_kind::slice:
      case step_kind::all_gather:
      case step_kind::all_to_all:
      case step_kind::all_to_all_v: {
        detail::simulate_moves(s, t, r, next[r], traffic);
        break;
      }
      case step_kind::all_reduce: {
        // Reduce-scatter of the local buffer in n blocks, then all-gather.
        std::fill(next[r].begin(), next[r].end(), detail::identity(s.before.op));
        for (std::size_t q : members)
          for (std::size_t i = 0; i < next[r].size(); ++i)
            next[r][i] = detail::combine(s.before.op, next[r][i], t.shards[q][i]);
        std::size_t const own = block_part(next[r].size(), n, group_position(mesh, s.axes, r)).size();
        traffic.received[r] += (n - 1) * own + (next[r].size() - own);
        traffic.sent[r] += (n - 1) * own + (next[r].size() - own);
        break;
      }
      case step_kind::reduce_scatter: {
        detail::simulate_reduce_scatter(s, t, r, members, next[r], traffic);
        break;
      }
      case step_kind::to_partial: {
        bool const keeps = group_position(mesh, s.axes, r) == 0;
        for (std::size_t i = 0; i < next[r].size(); ++i)
          next[r][i] = keeps ? t.shards[r][i] : detail::identity(s.after.op);
        break;
      }
      case step_kind::permute: {
        std::size_t const q = permutation_source(mesh, s.axes, r);
        next[r] = t.shards[q];
        if (q != r) {
          traffic.received[r] += next[r].size();
          traffic.sent[q] += next[r].size();
        }
        break;
      }
    }
  }
  t.shards = std::move(next);
  t.layout = s.after;
}

// Executes a whole plan; returns every rank's traffic.
inline simulated_traffic simulate(redistribution_plan const& plan, simulated_tensor& t) {
  simulated_traffic traffic{std::vector<std::size_t>(t.mesh.size(), 0), std::vector<std::size_t>(t.mesh.size(), 0)};
  for (std::size_t i = 0; i < plan.size(); ++i) simulate(plan[i], t, traffic);
  return traffic;
}

}  // namespace shardmesh::reference
