#pragma once
// The command line of shardmesh-plan, parsed with CLI11.

#include "request.hpp"

#include <optional>
#include <string>

namespace plan_tool {

// --mesh (every extent given), --shape, --type, --from, --to, and --all
// (rank every target layout by planned cost) fill request_args.
struct options : request_args {
  bool json = false;  // one JSON document instead of text
  bool draw = false;  // the before and after pictures, in the terminal
  std::string svg;    // the pictures and the plan as an SVG file
  std::string html;   // the pictures, the plan and its JSON as a page
};

// Parses argv into `out`. Returns the exit status to leave with when the
// program should stop now (--help, or a usage error, already reported).
[[nodiscard]] std::optional<int> parse_options(int argc, char const* const* argv, options& out);

}  // namespace plan_tool
