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
// selection element by element, and so does any range of its rows.

#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/io/detail/hdf5.hpp"

#include <hdf5.h>

#include <algorithm>
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

// The runs of global indices that coordinates c hold at the local indices
// `part` of one dimension. Postcondition: their blocks add up to part.size().
// Precondition: part lies in [0, local_extent(mesh, dim, extent, c)).
[[nodiscard]] inline std::vector<run> runs_of(mesh_shape const& mesh, bound_dim const& dim, std::size_t extent,
                                              mesh_coordinates const& c, interval part) {
  if (part.size() == 0) return {};
  auto const global = [&](std::size_t i) { return to_global(mesh, dim, extent, c, i); };
  if (dim.dist == distribution::block) return {run{global(part.begin), 1, 1, part.size()}};
  // Cyclic: a short head up to a block boundary, whole blocks, a short tail.
  std::size_t const b = dim.block_size;
  std::vector<run> runs;
  std::size_t i = part.begin;
  if (i % b != 0) {
    std::size_t const n = std::min(b - i % b, part.end - i);
    runs.push_back(run{global(i), 1, 1, n});
    i += n;
  }
  if (std::size_t const whole = (part.end - i) / b; whole > 0) {
    runs.push_back(run{global(i), shard_count(mesh, dim) * b, whole, b});
    i += whole * b;
  }
  if (i < part.end) runs.push_back(run{global(i), 1, 1, part.end - i});
  return runs;
}

// Selects in `space` (the global dataset's) the elements that rank holds
// under l at local indices `rows` of dimension 0 (every index of the
// others); nothing if there are none. Returns the number selected.
inline std::size_t select_shard(hid_t space, mesh_shape const& mesh, bound_layout const& l, tensor_index const& global,
                                std::size_t rank, interval rows) {
  H5Sselect_none(space);
  mesh_coordinates const c = coordinates_of(mesh, rank);
  std::vector<std::vector<run>> per_dim;
  std::size_t total = 1;
  for (std::size_t d = 0; d < l.rank; ++d) {
    interval const part = d == 0 ? rows : interval{0, local_extent(mesh, l.dims[d], global[d], c)};
    per_dim.push_back(runs_of(mesh, l.dims[d], global[d], c, part));
    if (per_dim.back().empty()) return 0;
    total *= part.size();
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

// A shard moves through the file in pieces of whole rows (dimension 0).
// A piece that is checksummed is small enough to stay in a core's own
// cache (1 MiB: half of a 2 MiB L2) between its checksum and its write,
// or its read and its checksum; one that is not is larger, in fewer calls.
inline constexpr std::size_t checked_piece_bytes = std::size_t{1} << 20;
inline constexpr std::size_t unchecked_piece_bytes = std::size_t{64} << 20;

[[nodiscard]] inline std::size_t rows_per_piece(std::size_t row_bytes, std::size_t piece_bytes) {
  return std::max<std::size_t>(1, piece_bytes / std::max<std::size_t>(1, row_bytes));
}

// The local rows of piece k of a shard with `rows` rows of `row_bytes`
// bytes, in pieces of about piece_bytes; empty past the last piece.
[[nodiscard]] inline interval piece_rows(std::size_t k, std::size_t rows, std::size_t row_bytes,
                                         std::size_t piece_bytes) {
  std::size_t const per_piece = rows_per_piece(row_bytes, piece_bytes);
  return {std::min(k * per_piece, rows), std::min((k + 1) * per_piece, rows)};
}

[[nodiscard]] inline std::size_t piece_count(std::size_t rows, std::size_t row_bytes, std::size_t piece_bytes) {
  std::size_t const per_piece = rows_per_piece(row_bytes, piece_bytes);
  return (rows + per_piece - 1) / per_piece;
}

}  // namespace shardmesh::io::detail
