#pragma once
// The primitive steps of a redistribution, each acting on a group of mesh
// axes, and what each costs. A step is described by the layouts before and
// after it; docs/02-redistribution.md has the table. Pure constexpr; no
// Kokkos or MPI.
//
// With nested block geometry (shard_geometry.hpp) every step below is exact
// for any extent, even or not: appending axes to a dimension refines each
// shard, removing a suffix of a dimension's axes merges the group's shards.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/algebra/static_string.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace shardmesh {

enum class step_kind : unsigned char {
  slice,           // R -> S(d) on the group: each rank keeps part of what it holds
  all_gather,      // S(d) -> R: a suffix of a dimension's axes (or several dims' suffixes)
  all_to_all,      // S(d0) -> S(d1): a suffix of d0's axes moves to the end of d1's
  all_reduce,      // P -> R
  reduce_scatter,  // P -> S(d)
  to_partial,      // R -> P: coordinate 0 keeps the data, the others hold the op's identity
  permute,         // two axes of equal extent swap roles: point-to-point
  all_to_all_v,    // anything -> anything without partial axes: exact interval intersections
};

[[nodiscard]] constexpr std::string_view to_string(step_kind kind) {
  switch (kind) {
    case step_kind::slice: return "slice";
    case step_kind::all_gather: return "all_gather";
    case step_kind::all_to_all: return "all_to_all";
    case step_kind::all_reduce: return "all_reduce";
    case step_kind::reduce_scatter: return "reduce_scatter";
    case step_kind::to_partial: return "to_partial";
    case step_kind::permute: return "permute";
    case step_kind::all_to_all_v: return "all_to_all_v";
  }
  return "?";
}

// Whether a step moves data between ranks (costs a latency).
[[nodiscard]] constexpr bool communicates(step_kind kind) {
  return kind != step_kind::slice && kind != step_kind::to_partial;
}

struct plan_step {
  step_kind kind = step_kind::slice;
  axis_set axes;                // the mesh axes the step acts on
  std::size_t from_dim = npos;  // all_to_all
  std::size_t to_dim = npos;    // slice, all_to_all, reduce_scatter
  bound_layout before;
  bound_layout after;
  constexpr bool operator==(plan_step const&) const = default;
};

// Costs are integers in units of 1/(1024 * size^2) of the global tensor, so
// that every even-case fraction below is exact and comparisons have no
// rounding. A latency (alpha) is charged per communicating step.
struct cost_model {
  std::uint64_t alpha_per_1024 = 1;  // a step's latency, in 1024ths of moving the global tensor
};

[[nodiscard]] constexpr std::uint64_t global_units(mesh_shape const& mesh) {
  std::uint64_t const size = mesh.size();
  return 1024 * size * size;
}

namespace detail {

// Even-case fraction num/den of one dimension that a rank holds under both
// a and b: block shards are exact intervals; a cyclic shard is modelled as
// spread evenly over the other layout's shards unless both are the same.
struct fraction {
  std::uint64_t num = 1;
  std::uint64_t den = 1;
};

[[nodiscard]] constexpr fraction dim_overlap_fraction(mesh_shape const& mesh, bound_dim const& a, bound_dim const& b,
                                                      mesh_coordinates const& c) {
  std::uint64_t const na = shard_count(mesh, a);
  std::uint64_t const nb = shard_count(mesh, b);
  if (a.dist == distribution::block && b.dist == distribution::block) {
    // [sa/na, (sa+1)/na) and [sb/nb, (sb+1)/nb) in units of 1/(na*nb).
    std::uint64_t const sa = shard_index(mesh, a, c);
    std::uint64_t const sb = shard_index(mesh, b, c);
    std::uint64_t const begin = std::max(sa * nb, sb * na);
    std::uint64_t const end = std::min((sa + 1) * nb, (sb + 1) * na);
    return {end > begin ? end - begin : 0, na * nb};
  }
  if (a == b) return {1, na};
  return {1, na * nb};
}

// Elements a rank holds under both layouts, even case, in global_units
// (rounded down where the fractions do not divide them).
[[nodiscard]] constexpr std::uint64_t overlap_units(mesh_shape const& mesh, bound_layout const& a,
                                                    bound_layout const& b, std::size_t rank) {
  mesh_coordinates const c = coordinates_of(mesh, rank);
  std::uint64_t units = global_units(mesh);
  for (std::size_t d = 0; d < a.rank; ++d) {
    fraction const f = dim_overlap_fraction(mesh, a.dims[d], b.dims[d], c);
    units = units * f.num / f.den;
  }
  return units;
}

}  // namespace detail

// Elements a rank receives in the step, even case, in global_units. For a
// permutation, the ranks whose piece changes receive all of it; for an
// all-to-all-v, the rank that needs most of what it does not hold.
[[nodiscard]] constexpr std::uint64_t step_bytes(mesh_shape const& mesh, plan_step const& s) {
  std::uint64_t const unit = global_units(mesh);
  std::uint64_t const local = unit / group_size(mesh, sharding_axes(s.before));  // the input shard
  std::uint64_t const n = group_size(mesh, s.axes);
  switch (s.kind) {
    case step_kind::slice:
    case step_kind::to_partial: return 0;
    case step_kind::all_gather: return (n - 1) * local;
    case step_kind::all_to_all:
    case step_kind::reduce_scatter: return (n - 1) * (local / n);
    case step_kind::all_reduce: return 2 * (n - 1) * (local / n);
    case step_kind::permute: return local;
    case step_kind::all_to_all_v: {
      std::uint64_t const target = unit / group_size(mesh, sharding_axes(s.after));
      std::uint64_t most = 0;
      for (std::size_t r = 0; r < mesh.size(); ++r)
        most = std::max(most, target - detail::overlap_units(mesh, s.after, s.before, r));
      return most;
    }
  }
  return 0;
}

// Elements a rank holds in a layout, even case, in units of 1/size of the global tensor.
[[nodiscard]] constexpr std::uint64_t local_share(mesh_shape const& mesh, bound_layout const& l) {
  return mesh.size() / group_size(mesh, sharding_axes(l));
}

// "tp", "dp,tp": the axes of mask in mesh order.
[[nodiscard]] constexpr fixed_text axis_names_of(mesh_shape const& mesh, axis_set axes) {
  fixed_text out;
  bool first = true;
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (axes.contains(a)) {
      out << (first ? "" : ",") << mesh[a].name;
      first = false;
    }
  return out;
}

// Compact notation of a bound layout, as to_string(layout).
[[nodiscard]] constexpr fixed_text to_string(mesh_shape const& mesh, bound_layout const& l) {
  return to_string(unbind(mesh, l));
}

// "all_to_all(tp, dim 0->1)", "reduce_scatter(sum, tp, dim 0)", "permute(dp<->tp)".
[[nodiscard]] constexpr fixed_text to_string(mesh_shape const& mesh, plan_step const& s) {
  fixed_text out;
  out << to_string(s.kind) << "(";
  if (s.kind == step_kind::all_reduce || s.kind == step_kind::reduce_scatter || s.kind == step_kind::to_partial)
    out << to_string(s.kind == step_kind::to_partial ? s.after.op : s.before.op) << ", ";  // the op reduced or made
  if (s.kind == step_kind::permute) {
    bool first = true;
    for (std::size_t a = 0; a < mesh.ndim; ++a)
      if (s.axes.contains(a)) {
        out << (first ? "" : "<->") << mesh[a].name;
        first = false;
      }
  } else {
    out << axis_names_of(mesh, s.axes);
  }
  if (s.kind == step_kind::all_to_all) out << ", dim " << s.from_dim << "->" << s.to_dim;
  if (s.kind == step_kind::slice || s.kind == step_kind::reduce_scatter) out << ", dim " << s.to_dim;
  if (s.kind == step_kind::all_gather) {
    out << ", dim";
    bool first = true;
    for (std::size_t d = 0; d < s.before.rank; ++d)
      if (s.before.dims[d].count != s.after.dims[d].count) {
        out << (first ? " " : ",") << d;
        first = false;
      }
  }
  return out << ")";
}

}  // namespace shardmesh
