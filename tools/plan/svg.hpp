#pragma once
// --svg: the before and after pictures side by side, one colour per rank
// (blocks with copies on several ranks striped in their colours, partial
// blocks with a dashed border and "P a+b"), the plan's steps between them,
// the totals and a legend below. Self-contained: no external fonts or files.

#include "blocks.hpp"
#include "report.hpp"
#include "request.hpp"

#include <string>

namespace plan_tool {

// Blocks per dimension an SVG picture shows at most.
inline constexpr std::size_t svg_block_limit = 64;

[[nodiscard]] std::string svg(request const& r, plan_report const& p, block_grid const& before,
                              block_grid const& after);

}  // namespace plan_tool
