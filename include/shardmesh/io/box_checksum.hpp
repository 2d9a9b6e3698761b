#pragma once
// Checksums of the boxes a checkpoint was written in, checkable under any
// other layout.
//
// A dataset is written in boxes: the shards of its layout when saved, one
// writer per replica group. The checksum of a box is a position-weighted sum
// of its elements' bits, modulo 2^64:
//
//   sum over the box's elements e of  key(position(e)) * bits(e),
//   key(p) = key_base + key_step * p   (key_base odd, key_step even: keys are odd)
//
// where position is the element's row-major index in the global array. A
// sum splits over any partition of the box, so readers under another layout
// (other mesh, other rank count) each add up the elements they read into the
// box that held them when saved, and one all-reduce gives every box's sum
// back. An odd key is invertible modulo 2^64, so any change to one element
// changes the sum; swapping two different elements changes it by
// key_step * (p - q) * (bits(e) - bits(f)), never zero for the extents and
// element sizes a checkpoint holds. Host memory, no communication.

#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace shardmesh::io {

inline constexpr std::uint64_t key_base = 0x9e3779b97f4a7c15ULL;  // odd
inline constexpr std::uint64_t key_step = 0xd1b54a32d192ed02ULL;  // even

// An element's bits as an unsigned integer of its size.
template <class T>
[[nodiscard]] std::uint64_t element_bits(T const& value) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "checkpoint: elements of 1, 2, 4 or 8 bytes");
  if constexpr (sizeof(T) == 1) return std::bit_cast<std::uint8_t>(value);
  if constexpr (sizeof(T) == 2) return std::bit_cast<std::uint16_t>(value);
  if constexpr (sizeof(T) == 4) return std::bit_cast<std::uint32_t>(value);
  if constexpr (sizeof(T) == 8) return std::bit_cast<std::uint64_t>(value);
}

// Where the boxes were: the layout and mesh a dataset was saved under.
struct box_grid {
  mesh_shape mesh;
  bound_layout layout;
};

namespace detail {

// The row-major rank stride of each mesh axis.
[[nodiscard]] constexpr mesh_coordinates rank_strides(mesh_shape const& mesh) {
  mesh_coordinates stride{};
  std::size_t s = 1;
  for (std::size_t a = mesh.ndim; a-- > 0;) {
    stride[a] = s;
    s *= mesh.extent(a);
  }
  return stride;
}

// For each local index of one dimension: its share of the global row-major
// position, and its share of the rank of the box that holds it.
struct dimension_terms {
  std::vector<std::uint64_t> position;
  std::vector<std::size_t> box;
};

inline dimension_terms terms_of(std::size_t d, mesh_shape const& mesh, bound_layout const& l,
                                tensor_index const& global, mesh_coordinates const& at, box_grid const& boxes,
                                std::uint64_t position_stride) {
  mesh_coordinates const stride = rank_strides(boxes.mesh);
  bound_dim const& saved = boxes.layout.dims[d];
  std::size_t const n = local_extent(mesh, l.dims[d], global[d], at);
  dimension_terms t{std::vector<std::uint64_t>(n), std::vector<std::size_t>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t const g = to_global(mesh, l.dims[d], global[d], at, i);
    t.position[i] = g * position_stride;
    dim_location const where = locate(boxes.mesh, saved, global[d], g);
    for (std::size_t k = 0; k < saved.count; ++k) t.box[i] += where.coordinates[saved.axes[k]] * stride[saved.axes[k]];
  }
  return t;
}

}  // namespace detail

// Adds the elements of one rank's shard (under layout l on mesh, row-major
// in `local`) into the sums of the boxes of `boxes` that hold them.
// Precondition: sums has boxes.mesh.size() entries; local holds the
// shard's local_size elements.
template <class T>
void add_to_box_checksums(std::span<T const> local, mesh_shape const& mesh, bound_layout const& l,
                          tensor_index const& global, std::size_t rank, box_grid const& boxes,
                          std::vector<std::uint64_t>& sums) {
  std::size_t const r = l.rank;
  if (local.empty()) return;
  mesh_coordinates const at = coordinates_of(mesh, rank);
  std::vector<detail::dimension_terms> terms;
  std::uint64_t stride = 1;
  std::vector<std::uint64_t> strides(r);
  for (std::size_t d = r; d-- > 0;) {
    strides[d] = stride;
    stride *= global[d];
  }
  for (std::size_t d = 0; d < r; ++d) terms.push_back(detail::terms_of(d, mesh, l, global, at, boxes, strides[d]));
  // Odometer over every dimension but the last; the last one runs inside.
  std::vector<std::size_t> index(r, 0);
  auto const& last = terms[r - 1];
  std::size_t const row = last.position.size();
  T const* element = local.data();
  while (true) {
    std::uint64_t base_position = 0;
    std::size_t base_box = 0;
    for (std::size_t d = 0; d + 1 < r; ++d) {
      base_position += terms[d].position[index[d]];
      base_box += terms[d].box[index[d]];
    }
    for (std::size_t i = 0; i < row; ++i, ++element)
      sums[base_box + last.box[i]] +=
          (key_base + key_step * (base_position + last.position[i])) * element_bits(*element);
    std::size_t d = r - 1;
    while (d-- > 0 && ++index[d] == terms[d].position.size()) index[d] = 0;
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

}  // namespace shardmesh::io
