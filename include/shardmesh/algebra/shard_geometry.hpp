#pragma once
// Which elements of a tensor each rank holds under a layout.
//
// Block, one axis of extent n: chunk = ceil(E/n); the shard with coordinate
// c is [min(c*chunk, E), min((c+1)*chunk, E)): trailing shards may be short
// or empty. Several axes (x1..xj) split nested, major first: x1 splits the
// dimension, x2 splits x1's shard the same way, and so on. Nested splitting
// equals splitting by the product of the extents whenever the extent divides
// evenly, and keeps every redistribution step exact when it does not (see
// docs/01-layouts.md).
//
// Cyclic(b): blocks of b elements dealt round-robin over N = product of the
// extents; the shard index s is the mixed radix of the coordinates (x1 most
// significant), and shard s owns blocks s, s+N, s+2N, ...
//
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"

#include <array>
#include <cstddef>

namespace shardmesh {

using tensor_index = std::array<std::size_t, max_tensor_rank>;

// A dimension's placement with mesh axes by index.
// Small integer types keep plan searches cheap at compile time.
struct bound_dim {
  std::array<unsigned char, max_mesh_axes> axes{};
  unsigned char count = 0;
  distribution dist = distribution::block;
  std::size_t block_size = 0;
  constexpr bool operator==(bound_dim const&) const = default;
};

// A layout bound to a mesh: what geometry and planning work on.
struct bound_layout {
  std::array<bound_dim, max_tensor_rank> dims{};
  std::size_t rank = 0;
  axis_set partial_axes;  // the mesh axes the tensor is partial on
  reduce_op op = reduce_op::sum;
  constexpr bool operator==(bound_layout const&) const = default;
};

// Precondition: layout_error(..., mesh, l) is empty.
[[nodiscard]] constexpr bound_layout bind(mesh_shape const& mesh, layout const& l) {
  bound_layout b;
  b.rank = l.rank;
  b.op = l.is_partial() ? l.op : reduce_op::sum;  // equal layouts compare equal
  for (std::size_t d = 0; d < l.rank; ++d) {
    if (l[d].axes.count == 0) continue;  // replicated: block, like every unsharded dimension
    b.dims[d].count = static_cast<unsigned char>(l[d].axes.count);
    b.dims[d].dist = l[d].dist;
    b.dims[d].block_size = l[d].block_size;
    for (std::size_t i = 0; i < l[d].axes.count; ++i)
      b.dims[d].axes[i] = static_cast<unsigned char>(mesh.find(l[d].axes.names[i].view()));
  }
  for (std::size_t i = 0; i < l.partial_axes.count; ++i)
    b.partial_axes.insert(mesh.find(l.partial_axes.names[i].view()));
  return b;
}

// The layout with axes by name again. Postcondition: bind(mesh, unbind(mesh, l)) == l.
[[nodiscard]] constexpr layout unbind(mesh_shape const& mesh, bound_layout const& l) {
  layout named;
  named.rank = l.rank;
  named.op = l.op;
  for (std::size_t d = 0; d < l.rank; ++d) {
    named.dims[d].dist = l.dims[d].dist;
    named.dims[d].block_size = l.dims[d].block_size;
    for (std::size_t i = 0; i < l.dims[d].count; ++i) named.dims[d].axes.push_back(mesh[l.dims[d].axes[i]].name);
  }
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (l.partial_axes.contains(a)) named.partial_axes.push_back(mesh[a].name);
  return named;
}

// Number of shards of a dimension: the product of its axes' extents.
[[nodiscard]] constexpr std::size_t shard_count(mesh_shape const& mesh, bound_dim const& dim) {
  std::size_t n = 1;
  for (std::size_t i = 0; i < dim.count; ++i) n *= mesh.extent(dim.axes[i]);
  return n;
}

// Mixed radix of the coordinates on the dimension's axes, first axis major.
[[nodiscard]] constexpr std::size_t shard_index(mesh_shape const& mesh, bound_dim const& dim,
                                                mesh_coordinates const& c) {
  std::size_t s = 0;
  for (std::size_t i = 0; i < dim.count; ++i) s = s * mesh.extent(dim.axes[i]) + c[dim.axes[i]];
  return s;
}

struct interval {
  std::size_t begin = 0;
  std::size_t end = 0;
  [[nodiscard]] constexpr std::size_t size() const { return end - begin; }
  constexpr bool operator==(interval const&) const = default;
};

// Shard c of [0, extent) split into n blocks of ceil(extent/n).
[[nodiscard]] constexpr interval block_part(std::size_t extent, std::size_t n, std::size_t c) {
  std::size_t const chunk = (extent + n - 1) / n;
  std::size_t const begin = c * chunk < extent ? c * chunk : extent;
  std::size_t const end = begin + chunk < extent ? begin + chunk : extent;
  return {begin, end};
}

// The global interval a block dimension holds at coordinates c.
// Postcondition: the intervals of all coordinates tile [0, extent).
[[nodiscard]] constexpr interval block_interval(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                                mesh_coordinates const& c) {
  interval piece{0, extent};
  for (std::size_t i = 0; i < dim.count; ++i) {
    interval const sub = block_part(piece.size(), mesh.extent(dim.axes[i]), c[dim.axes[i]]);
    piece = {piece.begin + sub.begin, piece.begin + sub.end};
  }
  return piece;
}

// Elements of a dimension held at coordinates c.
[[nodiscard]] constexpr std::size_t local_extent(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                                 mesh_coordinates const& c) {
  if (dim.dist == distribution::block) return block_interval(mesh, dim, extent, c).size();
  std::size_t const n = shard_count(mesh, dim);
  std::size_t const s = shard_index(mesh, dim, c);
  std::size_t const b = dim.block_size;
  std::size_t const blocks = (extent + b - 1) / b;
  if (s >= blocks) return 0;
  std::size_t const owned = (blocks - 1 - s) / n + 1;  // blocks s, s+n, ... below `blocks`
  bool const owns_last = (blocks - 1) % n == s;
  std::size_t const last = extent - (blocks - 1) * b;  // size of the last, maybe short, block
  return owns_last ? (owned - 1) * b + last : owned * b;
}

// Global index of local index i of a dimension held at coordinates c.
// Precondition: i < local_extent(mesh, dim, extent, c).
[[nodiscard]] constexpr std::size_t to_global(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                              mesh_coordinates const& c, std::size_t i) {
  if (dim.dist == distribution::block) return block_interval(mesh, dim, extent, c).begin + i;
  std::size_t const n = shard_count(mesh, dim);
  std::size_t const b = dim.block_size;
  return (shard_index(mesh, dim, c) + (i / b) * n) * b + i % b;
}

// The coordinates (on the dimension's axes only) that hold global index g,
// and g's local index there. Postcondition: to_global(..., c, local) == g.
struct dim_location {
  mesh_coordinates coordinates{};
  std::size_t local = 0;
};

[[nodiscard]] constexpr dim_location locate(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                            std::size_t g) {
  dim_location where;
  if (dim.dist == distribution::block) {
    interval piece{0, extent};
    for (std::size_t i = 0; i < dim.count; ++i) {
      std::size_t const n = mesh.extent(dim.axes[i]);
      std::size_t const chunk = (piece.size() + n - 1) / n;
      std::size_t const c = (g - piece.begin) / chunk;
      where.coordinates[dim.axes[i]] = c;
      interval const sub = block_part(piece.size(), n, c);
      piece = {piece.begin + sub.begin, piece.begin + sub.end};
    }
    where.local = g - piece.begin;
    return where;
  }
  std::size_t const n = shard_count(mesh, dim);
  std::size_t const b = dim.block_size;
  std::size_t s = (g / b) % n;
  for (std::size_t i = dim.count; i-- > 0;) {
    std::size_t const e = mesh.extent(dim.axes[i]);
    where.coordinates[dim.axes[i]] = s % e;
    s /= e;
  }
  where.local = (g / b / n) * b + g % b;
  return where;
}

// How many local indices from i on, at coordinates c, hold consecutive
// global indices: the rest of the shard (block) or of i's block (cyclic).
// Precondition: i < local_extent(mesh, dim, extent, c). Postcondition: the
// result r is at least 1, and to_global(i + k) == to_global(i) + k for k < r.
[[nodiscard]] constexpr std::size_t consecutive_from(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                                     mesh_coordinates const& c, std::size_t i) {
  std::size_t const rest = local_extent(mesh, dim, extent, c) - i;
  if (dim.dist == distribution::block) return rest;
  std::size_t const in_block = dim.block_size - i % dim.block_size;
  return in_block < rest ? in_block : rest;
}

// How many global indices from g on are held by the shard that holds g: the
// rest of that shard (block) or of g's block (cyclic). Precondition:
// g < extent. Postcondition: the result r is at least 1, g + r <= extent,
// and locate(g + k) has locate(g)'s coordinates for k < r.
[[nodiscard]] constexpr std::size_t held_from(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                              std::size_t g) {
  dim_location const where = locate(mesh, dim, extent, g);
  if (dim.dist == distribution::block) return local_extent(mesh, dim, extent, where.coordinates) - where.local;
  std::size_t const in_block = dim.block_size - g % dim.block_size;
  return in_block < extent - g ? in_block : extent - g;
}

// Whether the ranks at coordinates c hold the index that `at` locates in a
// dimension placed by dim: they agree with it on the dimension's axes.
[[nodiscard]] constexpr bool holds_index(bound_dim const& dim, dim_location const& at, mesh_coordinates const& c) {
  for (std::size_t k = 0; k < dim.count; ++k)
    if (at.coordinates[dim.axes[k]] != c[dim.axes[k]]) return false;
  return true;
}

// c moved onto the coordinates that hold the index `at` locates in a
// dimension placed by dim (only the dimension's axes change).
[[nodiscard]] constexpr mesh_coordinates moved_to_index(bound_dim const& dim, dim_location const& at,
                                                        mesh_coordinates c) {
  for (std::size_t k = 0; k < dim.count; ++k) c[dim.axes[k]] = at.coordinates[dim.axes[k]];
  return c;
}

// Local extents of every dimension on a rank.
[[nodiscard]] constexpr tensor_index local_extents(mesh_shape const& mesh, bound_layout const& l,
                                                   tensor_index const& global, std::size_t rank) {
  tensor_index local{};
  mesh_coordinates const c = coordinates_of(mesh, rank);
  for (std::size_t d = 0; d < l.rank; ++d) local[d] = local_extent(mesh, l.dims[d], global[d], c);
  return local;
}

[[nodiscard]] constexpr tensor_index local_to_global(mesh_shape const& mesh, bound_layout const& l,
                                                     tensor_index const& global, std::size_t rank,
                                                     tensor_index const& local) {
  tensor_index g{};
  mesh_coordinates const c = coordinates_of(mesh, rank);
  for (std::size_t d = 0; d < l.rank; ++d) g[d] = to_global(mesh, l.dims[d], global[d], c, local[d]);
  return g;
}

// Where global index g lives: the owning rank with coordinate 0 on every
// axis that does not shard the tensor (other ranks on those axes hold
// copies, or partial contributions), and g's local index there.
struct location {
  std::size_t rank = 0;
  tensor_index local{};
};

[[nodiscard]] constexpr location owner(mesh_shape const& mesh, bound_layout const& l, tensor_index const& global,
                                       tensor_index const& g) {
  location where;
  mesh_coordinates c{};
  for (std::size_t d = 0; d < l.rank; ++d) {
    dim_location const at = locate(mesh, l.dims[d], global[d], g[d]);
    c = moved_to_index(l.dims[d], at, c);
    where.local[d] = at.local;
  }
  where.rank = rank_of(mesh, c);
  return where;
}

}  // namespace shardmesh
