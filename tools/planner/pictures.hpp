#pragma once
// shardmesh-plan-training's pictures, as self-contained SVG: every feasible
// plan's predicted memory per rank against its step time (one dot each,
// coloured by pipeline depth, the best ringed), and the best plans' step
// time in parts (computing, tensor-parallel collectives, ZeRO-3 gathers,
// the pipeline bubble, exposed data-parallel communication, the update).

#include "planner_files.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace planner_tool {

[[nodiscard]] std::string memory_time_svg(std::vector<judged_plan> const& plans);
[[nodiscard]] std::string parts_svg(std::vector<judged_plan> const& plans, std::size_t best);

}  // namespace planner_tool
