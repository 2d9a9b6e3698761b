#pragma once
// The command line of shardmesh-bench, parsed with CLI11: shardmesh-plan's
// arguments (the mesh may leave one extent to the number of ranks), the
// sizes, the repetitions and the output.

#include "plan/request.hpp"

#include <cstddef>
#include <optional>
#include <string>

namespace bench_tool {

// --mesh, --shape, --type, --from, --to and --targets all (request_args::all)
// fill request_args.
struct options : plan_tool::request_args {
  std::string sweep;             // "64KiB..256MiB", instead of --shape
  std::size_t repetitions = 20;  // timed runs of each case
  std::size_t warmup = 3;        // untimed runs before them
  bool json = false;             // one JSON document instead of text
  std::string output;            // the file rank 0 writes the report to; stdout when empty
};

// Parses argv into `out`. Returns the exit status to leave with when the
// program should stop now (--help, or a usage error, reported only where
// `speaks`: every rank parses the same arguments, rank 0 prints).
[[nodiscard]] std::optional<int> parse_options(int argc, char const* const* argv, options& out, bool speaks);

}  // namespace bench_tool
