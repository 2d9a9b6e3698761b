#pragma once
// What a plan sends between devices in one training step, tensor by
// tensor: each redistribution a stage declares (planned by the algebra),
// each exchange (context parallelism's ring, the experts' tokens), the
// pipeline's boundary transfers, and the gradients' reduction and ZeRO's
// gathers on dp. The planner's JSON lists them per plan and the plan page
// highlights them; the time model prices the same collectives.

#include <shardmesh/plan/memory_model.hpp>
#include <shardmesh/plan/training_plan.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace planner_tool {

struct crossing {
  std::size_t stage = 0;   // the model stage (its index in the plan's stages) that sends it
  std::string tensor;      // what moves: an activation, a gradient, key/value blocks, tokens
  std::string phase;       // "forward", "backward" or "after backward" (once per step)
  std::string collective;  // the collective the hardware model prices it as
  std::string axis;        // the mesh axes of its groups ("tp", "dp", "cp,tp", ...)
  std::size_t group = 1;   // ranks in each group
  std::size_t calls = 0;   // per step
  std::size_t bytes = 0;   // per step, in the buffers of the stage's first rank (as the time model prices them)
  std::vector<std::size_t> extents;  // the tensor's global extents, where it is one tensor
  std::string from, to;              // its layouts before and after, where a redistribution moves it
};

// Every crossing of one step of `plan`, stage by stage in forward order, then the step's end.
[[nodiscard]] std::vector<crossing> crossings_of(shardmesh::parallel::memory_model const& memory,
                                                 shardmesh::parallel::training_plan const& plan);

}  // namespace planner_tool
