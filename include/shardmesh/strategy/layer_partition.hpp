#pragma once
// Which layers each pipeline chunk holds. A model of L blocks, with an
// embedding before them and a head after them, is cut into V = p x v
// contiguous chunks (virtual stage k = chunk c of stage s, k = c p + s):
// chunk 0 holds the embedding, chunk V-1 the head, every block is in
// exactly one chunk and every chunk holds at least one block.
//
//   partition_layers(L, V, costs)   balanced: the costliest chunk (its blocks,
//                                   plus the embedding or the head) as cheap as it can be
//   partition_layers(L, counts)     as given, checked
//
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/errors.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

namespace shardmesh::parallel {

// The blocks [first, last) of a model, with the embedding before them and
// the final norm, head and loss after them, or not.
struct model_part {
  std::size_t first = 0, last = std::numeric_limits<std::size_t>::max();  // max: through the last block
  bool embedding = true, head = true;
  friend constexpr bool operator==(model_part const&, model_part const&) = default;
};

// The relative cost of each block, of the embedding and of the head (any
// unit: flops); no block costs: every block costs 1.
struct layer_costs {
  std::vector<double> blocks;
  double embedding = 0, head = 0;
};

namespace detail {

constexpr std::vector<model_part> parts_of(std::vector<std::size_t> const& counts) {
  std::vector<model_part> parts;
  std::size_t first = 0;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    parts.push_back({first, first + counts[k], k == 0, k + 1 == counts.size()});
    first += counts[k];
  }
  return parts;
}

}  // namespace detail

// Layer counts as given: chunk k holds counts[k] blocks.
[[nodiscard]] constexpr std::vector<model_part> partition_layers(std::size_t layers,
                                                                 std::vector<std::size_t> const& counts) {
  std::size_t placed = 0;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] == 0) throw invalid_option_error("pipeline: chunk " + std::to_string(k) + " has no layers");
    placed += counts[k];
  }
  if (counts.empty() || placed != layers)
    throw invalid_option_error("pipeline: the layer counts place " + std::to_string(placed) +
                               " layers, the model has " + std::to_string(layers) + " (every layer exactly once)");
  return detail::parts_of(counts);
}

// Balanced: over all cuts of the blocks into `chunks` non-empty runs, one
// whose costliest chunk is cheapest (dynamic programming over prefixes).
[[nodiscard]] constexpr std::vector<model_part> partition_layers(std::size_t layers, std::size_t chunks,
                                                                 layer_costs const& costs = {}) {
  if (chunks == 0 || chunks > layers)
    throw invalid_option_error("pipeline: " + std::to_string(chunks) + " chunks cannot each hold a layer of " +
                               std::to_string(layers) + " (a stage with no layers)");
  if (!costs.blocks.empty() && costs.blocks.size() != layers)
    throw invalid_option_error("pipeline: " + std::to_string(costs.blocks.size()) + " block costs for " +
                               std::to_string(layers) + " layers");
  constexpr double infinite = std::numeric_limits<double>::infinity();
  std::vector<double> prefix(layers + 1, 0);  // prefix[l]: the cost of blocks [0, l)
  for (std::size_t l = 0; l < layers; ++l) prefix[l + 1] = prefix[l] + (costs.blocks.empty() ? 1 : costs.blocks[l]);
  auto const cost = [&](std::size_t k, std::size_t first, std::size_t last) {
    return prefix[last] - prefix[first] + (k == 0 ? costs.embedding : 0) + (k + 1 == chunks ? costs.head : 0);
  };
  // best[k][l]: the least largest cost of the first k+1 chunks holding blocks [0, l); cut[k][l]: where chunk k starts.
  std::vector<std::vector<double>> best(chunks, std::vector<double>(layers + 1, infinite));
  std::vector<std::vector<std::size_t>> cut(chunks, std::vector<std::size_t>(layers + 1, 0));
  for (std::size_t l = 1; l <= layers; ++l) best[0][l] = cost(0, 0, l);
  for (std::size_t k = 1; k < chunks; ++k)
    for (std::size_t l = k + 1; l <= layers; ++l)
      for (std::size_t start = k; start < l; ++start) {
        double const c = std::max(best[k - 1][start], cost(k, start, l));
        if (c < best[k][l]) best[k][l] = c, cut[k][l] = start;
      }
  std::vector<std::size_t> counts(chunks);
  for (std::size_t k = chunks, l = layers; k-- > 0;) {
    std::size_t const start = k == 0 ? 0 : cut[k][l];
    counts[k] = l - start;
    l = start;
  }
  return detail::parts_of(counts);
}

}  // namespace shardmesh::parallel
