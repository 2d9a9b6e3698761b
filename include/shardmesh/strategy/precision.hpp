#pragma once
// The precisions a model trains in, as the planner sees them: the bytes of
// each kind of element a rank holds. A model of bf16 or fp16 keeps its
// parameters and activations in two bytes; its gradients, the optimizer's
// state and a master copy of every parameter in float (nn/parameter.hpp),
// as do the per-row statistics its layers save (norms' mean and 1/std,
// the loss's row max and sum of exponentials); its gradients may be kept
// in its own two bytes instead. A float model has no master copy. With
// Adam (two state tensors) that is, per parameter, 2 + 4 + (4 + 8) = 18
// bytes in bf16 (16 with bf16 gradients) against 4 + 4 + 8 = 16 in float.
//
// Pure; no Kokkos or MPI.

#include <cstddef>
#include <optional>
#include <string_view>

namespace shardmesh::parallel {

enum class precision { fp32, bf16, fp16 };
inline constexpr precision precisions[] = {precision::fp32, precision::bf16, precision::fp16};

[[nodiscard]] constexpr std::string_view to_string(precision p) {
  constexpr std::string_view names[] = {"fp32", "bf16", "fp16"};
  return names[static_cast<unsigned>(p)];
}

// The precision named `text`, if there is one.
[[nodiscard]] constexpr std::optional<precision> parse_precision(std::string_view text) {
  for (precision p : precisions)
    if (to_string(p) == text) return p;
  return std::nullopt;
}

struct element_bytes {
  std::size_t value = 4;      // parameters and activations
  std::size_t gradient = 4;   // gradients, accumulated and reduced
  std::size_t state = 4;      // each optimizer state tensor's element, and the master copy's
  std::size_t statistic = 4;  // per-row statistics saved for backward
  bool master = false;        // a master copy of every parameter beside the optimizer's state
};

// A model of precision p keeping its gradients in `gradients` (fp32, or p itself).
[[nodiscard]] constexpr element_bytes bytes_of(precision p, precision gradients = precision::fp32) {
  if (p == precision::fp32) return {};
  return {.value = 2, .gradient = gradients == precision::fp32 ? 4U : 2U, .state = 4, .statistic = 4, .master = true};
}

}  // namespace shardmesh::parallel
