#pragma once
// The blocks of a tensor a rank holds, with their global and local offsets:
// what a research code needs to compute on its shard in global indices.
//
// In each dimension a rank's local indices fall into runs of consecutive
// global indices: one run under a block split or replication, one per dealt
// block under a cyclic split (shard_geometry.hpp). A rank's owned blocks are
// the products of its runs, in row-major order of their local offsets; they
// tile its shard, and each holds global[d] offset + k at local offset + k.
//
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/shard_geometry.hpp"

#include <cstddef>
#include <vector>

namespace shardmesh {

// A box of a rank's shard whose global indices are consecutive in every dimension.
struct owned_block {
  tensor_index global_offset{};  // its first element's global index
  tensor_index local_offset{};   // the same element's index in the local shard
  tensor_index extents{};        // its size in each dimension (every one at least 1)

  friend constexpr bool operator==(owned_block const&, owned_block const&) = default;
};

// One run of a dimension: local indices [local, local + size) hold global
// indices [global, global + size).
struct index_run {
  std::size_t local = 0;
  std::size_t global = 0;
  std::size_t size = 0;
};

// The runs of dimension placed by dim, extent long, held at coordinates c,
// in local order. Postcondition: their sizes add up to local_extent(...).
[[nodiscard]] constexpr std::vector<index_run> runs_of(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                                       mesh_coordinates const& c) {
  std::vector<index_run> runs;
  std::size_t const held = local_extent(mesh, dim, extent, c);
  for (std::size_t i = 0; i < held;) {
    std::size_t const n = consecutive_from(mesh, dim, extent, c, i);
    runs.push_back({i, to_global(mesh, dim, extent, c, i), n});
    i += n;
  }
  return runs;
}

// The blocks `rank` holds of a tensor of these global extents in layout l.
// Postconditions: they tile the local shard, and an empty shard has none.
[[nodiscard]] constexpr std::vector<owned_block> owned_blocks(mesh_shape const& mesh, bound_layout const& l,
                                                              tensor_index const& global, std::size_t rank) {
  mesh_coordinates const c = coordinates_of(mesh, rank);
  std::vector<std::vector<index_run>> runs(l.rank);
  std::size_t count = 1;
  for (std::size_t d = 0; d < l.rank; ++d) {
    runs[d] = runs_of(mesh, l.dims[d], global[d], c);
    count *= runs[d].size();
  }
  std::vector<owned_block> blocks;
  blocks.reserve(count);
  for (std::size_t b = 0; b < count; ++b) {
    owned_block block;
    std::size_t rest = b;  // mixed radix over the runs, last dimension fastest
    for (std::size_t d = l.rank; d-- > 0;) {
      index_run const& r = runs[d][rest % runs[d].size()];
      rest /= runs[d].size();
      block.global_offset[d] = r.global;
      block.local_offset[d] = r.local;
      block.extents[d] = r.size;
    }
    blocks.push_back(block);
  }
  return blocks;
}

}  // namespace shardmesh
