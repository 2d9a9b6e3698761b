#pragma once
// A rank's shard as an HDF5 selection of the global dataset.
//
// Per dimension the shard's global indices are a few regular runs: one
// interval for a block distribution; for cyclic(b), the full blocks s, s+N,
// s+2N, ... as one strided run and a short last block as a second. The
// shard is the product of its dimensions' runs: a union of at most 2^rank
// hyperslabs. HDF5 walks a selection in row-major order of the global
// array, and a shard's local row-major order is the same order (to_global
// increases with the local index), so the local buffer maps onto the
// selection element by element.

#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/io/detail/hdf5.hpp"

#include <hdf5.h>

#include <array>
#include <cstddef>
#include <vector>

namespace shardmesh::io::detail {

// start, start + stride, ... (count times), each `block` elements long.
struct run {
  hsize_t start = 0;
  hsize_t stride = 1;
  hsize_t count = 1;
  hsize_t block = 0;
};

// The runs of global indices that coordinates c hold of one dimension.
// Postcondition: their blocks add up to local_extent(mesh, dim, extent, c).
[[nodiscard]] inline std::vector<run> runs_of(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                              mesh_coordinates const& c) {
  std::size_t const n = local_extent(mesh, dim, extent, c);
  if (n == 0) return {};
  std::size_t const first = to_global(mesh, dim, extent, c, 0);
  if (dim.dist == distribution::block) return {run{first, 1, 1, n}};
  std::size_t const b = dim.block_size;
  std::size_t const full = n / b;  // whole blocks; the rest is the short last block
  std::vector<run> runs;
  if (full > 0) runs.push_back(run{first, shard_count(mesh, dim) * b, full, b});
  if (n % b != 0) runs.push_back(run{to_global(mesh, dim, extent, c, full * b), 1, 1, n % b});
  return runs;
}

// Selects in `space` (the global dataset's) the elements rank holds under l;
// nothing if it holds none. Returns the number selected.
inline std::size_t select_shard(hid_t space, mesh_shape const& mesh, bound_layout const& l, tensor_index const& global,
                                std::size_t rank) {
  H5Sselect_none(space);
  mesh_coordinates const c = coordinates_of(mesh, rank);
  std::vector<std::vector<run>> per_dim;
  std::size_t total = 1;
  for (std::size_t d = 0; d < l.rank; ++d) {
    per_dim.push_back(runs_of(mesh, l.dims[d], global[d], c));
    if (per_dim.back().empty()) return 0;
    total *= local_extent(mesh, l.dims[d], global[d], c);
  }
  // Every combination of one run per dimension, OR-ed together.
  std::vector<std::size_t> pick(l.rank, 0);
  while (true) {
    std::array<hsize_t, max_tensor_rank> start{}, stride{}, count{}, block{};
    for (std::size_t d = 0; d < l.rank; ++d) {
      run const& r = per_dim[d][pick[d]];
      start[d] = r.start;
      stride[d] = r.stride;
      count[d] = r.count;
      block[d] = r.block;
    }
    H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), stride.data(), count.data(), block.data());
    std::size_t d = l.rank;
    while (d-- > 0 && ++pick[d] == per_dim[d].size()) pick[d] = 0;
    if (d == static_cast<std::size_t>(-1)) return total;
  }
}

}  // namespace shardmesh::io::detail
