#pragma once
// Groups of ranks: the ranks that differ from a rank only on a set of mesh
// axes (the members of a collective on those axes, or of a submesh). A group
// is ordered by the mixed radix of its members' coordinates on its axes, in
// mesh order. Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"

#include <cstddef>

namespace shardmesh {

// Product of the extents of the axes: the size of every group on them.
[[nodiscard]] constexpr std::size_t group_size(mesh_shape const& mesh, axis_set axes) {
  std::size_t n = 1;
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (axes.contains(a)) n *= mesh.extent(a);
  return n;
}

// Position of a rank within its group on `axes`.
// Postcondition: group_member(mesh, axes, rank, group_position(mesh, axes, rank)) == rank.
[[nodiscard]] constexpr std::size_t group_position(mesh_shape const& mesh, axis_set axes, std::size_t rank) {
  mesh_coordinates const c = coordinates_of(mesh, rank);
  std::size_t p = 0;
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (axes.contains(a)) p = p * mesh.extent(a) + c[a];
  return p;
}

// Member i of the group of `rank` on `axes`. Precondition: i < group_size(mesh, axes).
[[nodiscard]] constexpr std::size_t group_member(mesh_shape const& mesh, axis_set axes, std::size_t rank,
                                                 std::size_t i) {
  mesh_coordinates c = coordinates_of(mesh, rank);
  for (std::size_t a = mesh.ndim; a-- > 0;)
    if (axes.contains(a)) {
      c[a] = i % mesh.extent(a);
      i /= mesh.extent(a);
    }
  return rank_of(mesh, c);
}

// Which group on `axes` a rank is in: the groups numbered by the mixed radix
// of the coordinates on the other axes. Ranks share a group exactly when
// they share this number.
[[nodiscard]] constexpr std::size_t group_index(mesh_shape const& mesh, axis_set axes, std::size_t rank) {
  return group_position(mesh, axis_set::all(mesh.ndim) - axes, rank);
}

// The mesh a group forms: the axes of the set, in mesh order.
[[nodiscard]] constexpr mesh_shape group_shape(mesh_shape const& mesh, axis_set axes) {
  mesh_shape out;
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (axes.contains(a)) out.axes[out.ndim++] = mesh[a];
  return out;
}

// Mesh axes that shard some dimension of l.
[[nodiscard]] constexpr axis_set sharding_axes(bound_layout const& l) {
  axis_set axes;
  for (std::size_t d = 0; d < l.rank; ++d)
    for (std::size_t i = 0; i < l.dims[d].count; ++i) axes.insert(l.dims[d].axes[i]);
  return axes;
}

// Whether rank `holder` is where rank `to` takes elements from when they
// move out of layout l: the two agree on every axis that does not shard l.
[[nodiscard]] constexpr bool holds_for(mesh_shape const& mesh, bound_layout const& l, std::size_t holder,
                                       std::size_t to) {
  mesh_coordinates const a = coordinates_of(mesh, holder);
  mesh_coordinates const b = coordinates_of(mesh, to);
  axis_set const sharding = sharding_axes(l);
  for (std::size_t x = 0; x < mesh.ndim; ++x)
    if (!sharding.contains(x) && a[x] != b[x]) return false;
  return true;
}

// The rank that a permutation of the two axes of `swapped` sends to `rank`:
// its coordinates on the two axes exchanged. Precondition: swapped.size() == 2.
// Postcondition: applying it twice gives rank.
[[nodiscard]] constexpr std::size_t permutation_source(mesh_shape const& mesh, axis_set swapped, std::size_t rank) {
  mesh_coordinates c = coordinates_of(mesh, rank);
  std::size_t const x = swapped.first();
  std::size_t const y = (swapped - axis_set::of(x)).first();
  std::size_t const t = c[x];
  c[x] = c[y];
  c[y] = t;
  return rank_of(mesh, c);
}

}  // namespace shardmesh
