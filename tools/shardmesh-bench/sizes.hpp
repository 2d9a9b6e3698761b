#pragma once
// Sizes of the global tensor for --sweep, and the shape a size is given.

#include <shardmesh/algebra/shard_geometry.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace bench_tool {

// "65536", "64KiB", "256MiB", "1GiB" (also with "B" alone): bytes, or 0
// when the text is none of these.
[[nodiscard]] std::size_t parse_bytes(std::string_view text);

// "64KiB..256MiB": every power of two from the first to the last, doubling;
// "1MiB": that size alone. Sizes are powers of two of at least
// `element_bytes` (itself a power of two). Returns "" or the problem.
[[nodiscard]] std::string parse_sweep(std::string_view text, std::size_t element_bytes,
                                      std::vector<std::size_t>& sizes);

// The shape of a tensor of `rank` dimensions and `bytes` bytes (a power of
// two, at least one element): 2^k elements as 2^(k/rank) per dimension,
// the leading k % rank dimensions twice as long (f32 at 1 MiB: 512,512 for
// rank 2, 64,64,64 for rank 3; at 2 MiB: 1024,512).
[[nodiscard]] shardmesh::tensor_index shape_for(std::size_t bytes, std::size_t element_bytes, std::size_t rank);

// "64KiB", "1MiB", "1.5MiB", "48B".
[[nodiscard]] std::string size_label(std::size_t bytes);

}  // namespace bench_tool
