#pragma once
// The stages of a decoder-only model of L blocks (models/decoder.hpp), in
// forward order: 0 "embedding", 1 to L the blocks "h0" ..., L + 1 "head"
// (the final norm and the head), L + 2 "loss". Pure.

#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/plan/stage_work.hpp"

#include <cstddef>
#include <string>

namespace shardmesh::parallel {

[[nodiscard]] inline std::string decoder_stage_name(std::size_t layers, std::size_t stage) {
  if (stage == 0) return "embedding";
  if (stage <= layers) return "h" + std::to_string(stage - 1);
  return stage == layers + 1 ? "head" : "loss";
}

// Which calibrated overhead stage `stage` pays (hardware_model.hpp).
[[nodiscard]] constexpr stage_kind decoder_stage_kind(std::size_t layers, std::size_t stage) {
  if (stage == 0) return stage_kind::embedding;
  if (stage <= layers) return stage_kind::block;
  return stage == layers + 1 ? stage_kind::head : stage_kind::loss;
}

// Where `stage` sits in a pipeline partition.
[[nodiscard]] constexpr stage_place decoder_stage_place(std::size_t layers, std::size_t stage) {
  if (stage == 0) return stage_place::first;
  return stage <= layers ? stage_place::block : stage_place::last;
}

}  // namespace shardmesh::parallel
