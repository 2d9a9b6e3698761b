#pragma once
// The collectives data parallelism adds over dp for a stage's parameters,
// by ZeRO stage (docs/06-data-parallel.md): the gradients' reduction after
// the backward (an all-reduce, or from ZeRO-2 a reduce-scatter onto each
// rank's shard), ZeRO-1 and 2's all-gather of the updated values, and
// ZeRO-3's all-gathers of the parameters before each forward and each
// backward. The time model prices these and the plan page lists them: one
// rule for both.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/plan/hardware_model.hpp"
#include "shardmesh/strategy/state_sharding.hpp"

#include <array>
#include <cstddef>
#include <string_view>

namespace shardmesh::parallel {

// When in a step: before each micro-batch's forward or backward, or once after the last backward.
enum class dp_moment : unsigned char { before_forward, before_backward, after_backward };
// What moves: the parameters (values), their gradients, or the values the update changed.
enum class dp_payload : unsigned char { parameters, gradients, updated_parameters };

[[nodiscard]] constexpr std::string_view to_string(dp_moment m) {
  switch (m) {
    case dp_moment::before_forward: return "forward";
    case dp_moment::before_backward: return "backward";
    default: return "after backward";
  }
}

[[nodiscard]] constexpr std::string_view to_string(dp_payload p) {
  switch (p) {
    case dp_payload::parameters: return "parameters";
    case dp_payload::gradients: return "gradients";
    default: return "updated parameters";
  }
}

struct dp_collective {
  collective_kind kind = collective_kind::all_reduce;
  dp_payload what = dp_payload::gradients;
  dp_moment when = dp_moment::after_backward;
  // Once per micro-batch (the gathers ahead of each forward and backward), else once per step.
  [[nodiscard]] constexpr bool per_micro_batch() const { return when != dp_moment::after_backward; }
};

// The collectives, in the order a step runs them.
struct dp_collectives {
  std::array<dp_collective, 3> list{};
  std::size_t count = 0;
  [[nodiscard]] constexpr dp_collective const* begin() const { return list.data(); }
  [[nodiscard]] constexpr dp_collective const* end() const { return list.data() + count; }
};

[[nodiscard]] constexpr dp_collectives data_parallel_collectives(zero_stage stage) {
  dp_collectives out;
  auto const add = [&out](dp_collective c) { out.list[out.count++] = c; };
  if (stage == zero_stage::parameters) {
    add({collective_kind::all_gather, dp_payload::parameters, dp_moment::before_forward});
    add({collective_kind::all_gather, dp_payload::parameters, dp_moment::before_backward});
  }
  add({stage >= zero_stage::gradients ? collective_kind::reduce_scatter : collective_kind::all_reduce,
       dp_payload::gradients, dp_moment::after_backward});
  if (stage == zero_stage::optimizer_state || stage == zero_stage::gradients)
    add({collective_kind::all_gather, dp_payload::updated_parameters, dp_moment::after_backward});
  return out;
}

}  // namespace shardmesh::parallel
