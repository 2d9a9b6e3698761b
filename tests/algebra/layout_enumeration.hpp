#pragma once
// Every mesh and every layout of small size, for exhaustive property tests.

#include <shardmesh/algebra/layout.hpp>
#include <shardmesh/algebra/mesh_shape.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace shardmesh::test {

inline constexpr std::array<char const*, 4> axis_names{"a", "b", "c", "d"};

// Meshes of 1 to max_axes axes with extents 1..max_extent, plus a 1-D mesh of 4.
inline std::vector<mesh_shape> small_meshes(std::size_t max_axes, std::size_t max_extent) {
  std::vector<mesh_shape> meshes;
  for (std::size_t k = 1; k <= max_axes; ++k) {
    std::vector<std::size_t> e(k, 1);
    while (true) {
      mesh_shape m;
      for (std::size_t a = 0; a < k; ++a) m.axes[a] = {axis_name(std::string_view(axis_names[a])), e[a]};
      m.ndim = k;
      meshes.push_back(m);
      std::size_t a = 0;
      while (a < k && ++e[a] > max_extent) e[a++] = 1;
      if (a == k) break;
    }
  }
  meshes.push_back(mesh_shape{{"a", 4}});
  return meshes;
}

struct enumeration_options {
  std::vector<reduce_op> partial;   // also layouts partial on some axes, with each of these ops
  std::vector<std::size_t> cyclic;  // block sizes of cyclic variants of each sharded dimension
};

// Every layout of the given rank on mesh: each axis replicates, shards one
// dimension (in every order among that dimension's axes), or (if asked) is
// partial, with each op asked for; each sharded dimension block or cyclic.
inline std::vector<layout> all_layouts(mesh_shape const& mesh, std::size_t rank, enumeration_options const& options) {
  std::vector<layout> out;
  std::size_t const roles = rank + 1 + (options.partial.empty() ? 0 : 1);  // dims, replicated, partial
  std::vector<std::size_t> role(mesh.ndim, 0);
  while (true) {
    std::vector<std::vector<std::size_t>> by_dim(rank);
    layout base;
    base.rank = rank;
    for (std::size_t a = 0; a < mesh.ndim; ++a) {
      if (role[a] < rank) by_dim[role[a]].push_back(a);
      if (role[a] == rank + 1) base.partial_axes.push_back(mesh[a].name);
    }
    // Every op, every ordering of every dimension's axes, every distribution.
    std::vector<layout> partial_layouts{base};
    if (base.is_partial()) {
      partial_layouts.clear();
      for (reduce_op op : options.partial) {
        base.op = op;
        partial_layouts.push_back(base);
      }
    }
    for (std::size_t d = 0; d < rank; ++d) {
      std::vector<layout> next;
      auto axes = by_dim[d];
      std::sort(axes.begin(), axes.end());
      do {
        dim_placement p;
        for (std::size_t a : axes) p.axes.push_back(mesh[a].name);
        std::vector<dim_placement> variants{p};
        if (!axes.empty())
          for (std::size_t b : options.cyclic) {
            dim_placement c = p;
            c.dist = distribution::cyclic;
            c.block_size = b;
            variants.push_back(c);
          }
        for (auto const& l : partial_layouts)
          for (auto const& v : variants) {
            layout with = l;
            with.dims[d] = v;
            next.push_back(with);
          }
      } while (std::next_permutation(axes.begin(), axes.end()));
      partial_layouts = std::move(next);
    }
    out.insert(out.end(), partial_layouts.begin(), partial_layouts.end());
    std::size_t a = 0;
    while (a < mesh.ndim && ++role[a] == roles) role[a++] = 0;
    if (a == mesh.ndim) break;
  }
  return out;
}

}  // namespace shardmesh::test
