#pragma once
// --html: the transition as a page that opens from disk (nothing fetched),
// like the training planner's plan page: the two layouts on the device grid
// and the steps between them (the --svg picture, inline), the plan as text,
// and the plan as JSON for scripts (in a <script type="application/json"
// id="plan-data"> element).

#include "report.hpp"
#include "request.hpp"

#include <string>

namespace plan_tool {

[[nodiscard]] std::string html_page(request const& r, plan_report const& p, std::string const& picture);

}  // namespace plan_tool
