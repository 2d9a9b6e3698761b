#pragma once
// How the blocks of several parameters split over a data-parallel group of
// n ranks, as their state layout S splits them (state_sharding.hpp: "dp"
// the innermost axis of dimension 0): member m's block of the compute
// layout is rows of row_elements[m] elements each, and group rank q holds
// rows block_part(rows[m], n, q) of it, contiguous (dimension 0 is the
// outermost). A fused buffer of the group is rank-major: for each q, each
// member's rows of q, in member order. A gradient bucket reduce-scatters
// such a buffer, a fused gather all-gathers one.

#include "shardmesh/algebra/shard_geometry.hpp"

#include <cstddef>
#include <utility>
#include <vector>

namespace shardmesh::parallel::detail {

class dp_parts {
 public:
  dp_parts() = default;
  // Each member's rows and elements per row, over n ranks.
  dp_parts(std::vector<std::pair<std::size_t, std::size_t>> members, std::size_t n)
      : members_(std::move(members)), counts_(n, 0) {
    for (std::size_t q = 0; q < n; ++q)
      for (std::size_t m = 0; m < members_.size(); ++m) counts_[q] += part(m, q).second - part(m, q).first;
  }

  [[nodiscard]] std::size_t ranks() const { return counts_.size(); }
  [[nodiscard]] std::size_t members() const { return members_.size(); }
  // Elements of each group rank's part of the fused buffer.
  [[nodiscard]] std::vector<std::size_t> const& counts() const { return counts_; }
  [[nodiscard]] std::size_t total() const {
    std::size_t n = 0;
    for (std::size_t c : counts_) n += c;
    return n;
  }
  // Member m's block: its elements.
  [[nodiscard]] std::size_t elements(std::size_t m) const { return members_[m].first * members_[m].second; }
  // The elements [begin, end) of member m's block that group rank q holds.
  [[nodiscard]] std::pair<std::size_t, std::size_t> part(std::size_t m, std::size_t q) const {
    interval const rows = block_part(members_[m].first, ranks(), q);
    return {rows.begin * members_[m].second, rows.end * members_[m].second};
  }

 private:
  std::vector<std::pair<std::size_t, std::size_t>> members_;  // rows, elements per row
  std::vector<std::size_t> counts_;
};

}  // namespace shardmesh::parallel::detail
