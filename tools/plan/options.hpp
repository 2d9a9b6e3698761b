#pragma once
// The command line of shardmesh-plan, parsed with CLI11.

#include <optional>
#include <string>

namespace plan_tool {

struct options {
  std::string mesh;   // "dp=2,tp=2": every extent given
  std::string shape;  // "8,6": the global extents
  std::string type = "f32";
  std::string from;
  std::string to;     // empty with --all
  bool all = false;   // rank every target layout by planned cost
  bool json = false;  // one JSON document instead of text
  bool draw = false;  // the before and after pictures, in the terminal
  std::string svg;    // the pictures and the plan as an SVG file
};

// Parses argv into `out`. Returns the exit status to leave with when the
// program should stop now (--help, or a usage error, already reported).
[[nodiscard]] std::optional<int> parse_options(int argc, char const* const* argv, options& out);

}  // namespace plan_tool
