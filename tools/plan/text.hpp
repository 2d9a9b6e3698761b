#pragma once
// The plain-text output: the plan one step per line with its bytes per
// rank, then the totals; or with --all one line per target.

#include "report.hpp"
#include "request.hpp"
#include "targets.hpp"

#include <string>
#include <vector>

namespace plan_tool {

// "S(dp),R -> R,S(dp): all_to_all(dp, dim 0->1), 1/2 of local, 48 B per rank".
[[nodiscard]] std::string step_text(request const& r, step_report const& s);

// "all_to_all(dp, dim 0->1), then all_gather(tp, dim 1)"; "" without steps.
[[nodiscard]] std::string steps_text(request const& r, plan_report const& p);

// "total 48 B per rank, 1.00x the lower bound (48 B); peak extra memory 96 B per rank".
[[nodiscard]] std::string summary_text(plan_report const& p);

[[nodiscard]] std::string plan_text(request const& r, plan_report const& p);
[[nodiscard]] std::string targets_text(request const& r, std::vector<ranked_target> const& targets);

}  // namespace plan_tool
