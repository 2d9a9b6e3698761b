#pragma once
// --json: the plan, or with --all the ranked targets, as one JSON document.

#include "report.hpp"
#include "request.hpp"
#include "targets.hpp"

#include <string>
#include <vector>

namespace plan_tool {

[[nodiscard]] std::string plan_json(request const& r, plan_report const& p);
[[nodiscard]] std::string targets_json(request const& r, std::vector<ranked_target> const& targets);

}  // namespace plan_tool
