#pragma once
// Which ranks hold each block of a rank-1 or rank-2 tensor under a layout:
// what --draw and --svg show. A dimension is cut wherever the ranks that
// hold its indices change; the blocks are the product of the two cuts.

#include "request.hpp"

#include <shardmesh/algebra/layout.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace plan_tool {

struct segment {
  std::size_t begin = 0;
  std::size_t end = 0;
};

struct block {
  // The copies of the block's values, each the ranks that hold it: one rank
  // each unless the layout is partial, then the ranks whose addends combine.
  std::vector<std::vector<std::size_t>> copies;
  [[nodiscard]] std::vector<std::size_t> ranks() const;  // all holders, ascending
  // "0,1" (two copies), "2" (one), "P 0+1" (the sum of rank 0's and rank 1's addends).
  [[nodiscard]] std::string label() const;
  bool partial = false;
};

struct block_grid {
  shardmesh::layout layout;
  std::size_t rank = 0;       // of the tensor: 1 or 2
  std::vector<segment> rows;  // dimension 0 of a matrix; [0, 1) for a vector
  std::vector<segment> cols;  // dimension 1 of a matrix, dimension 0 of a vector
  std::vector<block> blocks;  // row-major
  std::string problem;        // why the picture cannot be drawn, or ""
  [[nodiscard]] block const& at(std::size_t row, std::size_t col) const { return blocks[row * cols.size() + col]; }
};

// The blocks of r's tensor under l, with at most `limit` cuts per dimension.
[[nodiscard]] block_grid blocks_of(request const& r, shardmesh::layout const& l, std::size_t limit);

// "rank 3 (dp=1,tp=1)".
[[nodiscard]] std::string coordinates_text(shardmesh::mesh_shape const& mesh, std::size_t rank);

}  // namespace plan_tool
