#pragma once
// The plan page: `shardmesh-plan-training ... --html FILE` writes one HTML
// file (plan_page.html, with the plans as JSON inside; it opens from disk
// and fetches nothing) that shows each plan on the model's diagram and the
// device grid: layouts, the tensors that cross devices with their
// collectives, memory against the capacity, the step's parts and the
// pipeline schedule; with a training run's report (train_gpt --report),
// what the run measured beside what the plan predicts.

#include "planner_files.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace planner_tool {

// `report`: a train_gpt report whose plan is one of `plans` (else invalid_option_error).
[[nodiscard]] std::string plan_page(nlohmann::ordered_json document, shardmesh::parallel::memory_model const& memory,
                                    shardmesh::parallel::time_model const& time, std::vector<judged_plan> const& plans,
                                    std::optional<nlohmann::ordered_json> const& report);

}  // namespace planner_tool
