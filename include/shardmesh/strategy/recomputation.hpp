#pragma once
// Activation recomputation (Korthikanti et al. 2022), per transformer
// block: what its forward keeps for its backward, and what the backward
// computes again instead.
//   none       everything the layers save (the scores' probabilities included)
//   selective  all but the attention core: the probabilities, which grow with
//              the sequence squared, are recomputed from the kept queries
//              and keys (one scores product and one softmax) in backward
//   full       only the block's input: the backward runs the block's whole
//              forward again first (its products, kernels and tensor-parallel
//              collectives)
// Gradients are bitwise those without recomputation: the recomputed
// tensors come from the same kernels on the same inputs.
//
// Pure; no Kokkos or MPI.

#include <optional>
#include <string_view>

namespace shardmesh::parallel {

enum class recompute_mode { none, selective, full };
inline constexpr recompute_mode recompute_modes[] = {recompute_mode::none, recompute_mode::selective,
                                                     recompute_mode::full};

[[nodiscard]] constexpr std::string_view to_string(recompute_mode m) {
  constexpr std::string_view names[] = {"none", "selective", "full"};
  return names[static_cast<unsigned>(m)];
}

// The mode named `text`, if there is one.
[[nodiscard]] constexpr std::optional<recompute_mode> parse_recompute_mode(std::string_view text) {
  for (recompute_mode m : recompute_modes)
    if (to_string(m) == text) return m;
  return std::nullopt;
}

}  // namespace shardmesh::parallel
