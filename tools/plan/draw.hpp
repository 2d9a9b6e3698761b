#pragma once
// The terminal picture of a block grid, like jax.debug.visualize_array_sharding:
// a box per block, labelled with the ranks that hold it, sized in
// proportion to the block's extents.

#include "blocks.hpp"

#include <string>

namespace plan_tool {

// Blocks per dimension a terminal picture shows at most.
inline constexpr std::size_t terminal_block_limit = 16;

[[nodiscard]] std::string draw(block_grid const& grid);

}  // namespace plan_tool
