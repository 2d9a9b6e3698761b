#pragma once
// 64-bit FNV-1a hashes of meshes and layouts: plan search tables, and the
// check that all ranks agree on a mesh or tensor. Pure constexpr.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"

#include <cstdint>

namespace shardmesh::detail {

struct fnv1a {
  std::uint64_t value = 1469598103934665603ULL;
  constexpr fnv1a& mix(std::uint64_t v) {
    value = (value ^ v) * 1099511628211ULL;
    return *this;
  }
};

constexpr std::uint64_t hash(mesh_shape const& mesh) {
  fnv1a h;
  h.mix(mesh.ndim);
  for (std::size_t a = 0; a < mesh.ndim; ++a) {
    h.mix(mesh.extent(a));
    for (char c : mesh[a].name.view()) h.mix(static_cast<unsigned char>(c));
  }
  return h.value;
}

constexpr std::uint64_t hash(layout const& l) {
  fnv1a h;
  auto const mix_names = [&](axis_list const& list) {
    h.mix(list.count);
    for (std::size_t i = 0; i < list.count; ++i)
      for (char c : list.names[i].view()) h.mix(static_cast<unsigned char>(c));
  };
  h.mix(l.rank).mix(static_cast<std::uint64_t>(l.op));
  for (std::size_t d = 0; d < l.rank; ++d) {
    h.mix(static_cast<std::uint64_t>(l[d].dist)).mix(l[d].block_size);
    mix_names(l[d].axes);
  }
  mix_names(l.partial_axes);
  return h.value;
}

constexpr std::uint64_t hash(bound_layout const& l) {
  fnv1a h;
  h.mix(l.rank).mix(l.partial_axes.bits).mix(static_cast<std::uint64_t>(l.op));
  for (std::size_t d = 0; d < l.rank; ++d) {
    h.mix(l.dims[d].count).mix(static_cast<std::uint64_t>(l.dims[d].dist)).mix(l.dims[d].block_size);
    for (std::size_t i = 0; i < l.dims[d].count; ++i) h.mix(l.dims[d].axes[i]);
  }
  return h.value;
}

}  // namespace shardmesh::detail
