#pragma once
// What a run measured, and how it is printed: a block per case for one
// transition at one size, a table by size for a sweep, a table by measured
// time per size for --targets all (with how well the planned cost orders
// the targets), or one JSON document.

#include "measure.hpp"
#include "options.hpp"

#include "plan/report.hpp"
#include "plan/request.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace bench_tool {

struct case_result {
  plan_tool::plan_report plan;
  bool is_source = false;            // the target is the source layout: a copy
  std::size_t planned_position = 1;  // in shardmesh-plan --all's order, cheapest plan first
  measurement measured;
};

// One size of the tensor and its cases, in planned order.
struct size_result {
  plan_tool::request request;  // with this size's extents
  std::size_t bytes = 0;       // of the global tensor
  std::vector<case_result> cases;
};

// How the planned cost orders the cases against their measured median
// times, pair by pair. Pairs of equal planned cost are left out of the
// concordant and discordant counts (the model does not order them).
struct ordering {
  std::size_t pairs = 0;             // n(n-1)/2
  std::size_t tied_in_cost = 0;      // same planned cost
  std::size_t tied_in_time = 0;      // same median time (and different cost)
  std::size_t concordant = 0;        // the cheaper plan measured faster
  std::size_t discordant = 0;        // the cheaper plan measured slower: an inversion
  std::size_t clear_inversions = 0;  // of those, the two [min, max] ranges apart
  std::optional<double> tau_b;       // Kendall's tau-b of cost against median time
};

[[nodiscard]] ordering compare_order(std::vector<case_result> const& cases);

// Indices of the cases, fastest median first (planned order among equals).
[[nodiscard]] std::vector<std::size_t> by_measured_time(std::vector<case_result> const& cases);

// GB/s: bytes the busiest rank received per redistribution over `seconds`
// (1 GB = 1e9 B); none when nothing moved.
[[nodiscard]] std::optional<double> gb_per_s(std::size_t bytes, double seconds);

// "shardmesh-bench: [3/11] f32[512,512] S(dp),R -> R,S(tp): median 0.41 ms (MPI 0.3 ms)"
[[nodiscard]] std::string progress_line(std::size_t done, std::size_t total, size_result const& s,
                                        case_result const& c);

[[nodiscard]] std::string text_report(options const& o, std::vector<size_result> const& runs);
[[nodiscard]] std::string json_report(options const& o, std::vector<size_result> const& runs);

}  // namespace bench_tool
