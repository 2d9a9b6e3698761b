#pragma once
// A plan with its numbers for the requested tensor: bytes each rank
// receives per step and in all (exact, plan_traffic.hpp), the lower bound
// on what the busiest rank must receive, and the peak extra memory.

#include "request.hpp"

#include <shardmesh/algebra/planner.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace plan_tool {

struct step_report {
  shardmesh::plan_step step;
  std::vector<std::size_t> bytes;  // received, by rank
};

struct plan_report {
  shardmesh::layout target;
  shardmesh::redistribution_plan plan;
  std::vector<step_report> steps;
  std::vector<std::size_t> total;  // bytes received over the plan, by rank
  // The least the busiest rank must receive by any sequence of transfers
  // (shardmesh::transition_lower_bound), in bytes.
  std::size_t lower_bound = 0;
  // The most a rank holds beyond its input and output shards at once: the
  // intermediate shards between steps plus, at most, the pack and receive
  // buffers of the step's collective (the runtime skips them when it can
  // send or receive in place).
  std::size_t peak_extra = 0;

  [[nodiscard]] std::size_t most_received() const;  // the busiest rank's total
};

// Plans r.from -> to. Precondition: transition_problem(r, to) is empty.
// Returns "" or why no plan exists.
[[nodiscard]] std::string make_report(request const& r, shardmesh::layout const& to, plan_report& out);

[[nodiscard]] std::size_t most(std::vector<std::size_t> const& by_rank);
[[nodiscard]] std::size_t least(std::vector<std::size_t> const& by_rank);

// "48 B", "1.5 KiB", "64 MiB".
[[nodiscard]] std::string bytes_text(std::size_t bytes);
// "48 B per rank", or "40-48 B per rank" when ranks differ.
[[nodiscard]] std::string per_rank_text(std::vector<std::size_t> const& by_rank);
// "1.00x the lower bound", or "at the lower bound" when both are 0.
[[nodiscard]] std::string against_bound_text(plan_report const& p);

}  // namespace plan_tool
