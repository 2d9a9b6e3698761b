#pragma once
// --all: every target layout of the tensor's rank on the mesh, planned and
// ranked. The targets are the block layouts over the mesh's axes of extent
// greater than 1 (every order of the axes on each dimension), partial only
// on axes the source is already partial on (with its op); the source itself
// is among them and comes first, at cost 0.

#include "report.hpp"
#include "request.hpp"

#include <vector>

namespace plan_tool {

struct ranked_target {
  plan_report report;
  bool is_source = false;
};

// Cheapest first: by the planner's cost, then its peak local shard, then
// fewer steps, then fewer bytes for this tensor, then notation.
[[nodiscard]] std::vector<ranked_target> rank_targets(request const& r);

}  // namespace plan_tool
