#pragma once
// The planner's files. The hardware file: a hardware_model as JSON,
// written by shardmesh-calibrate and read by shardmesh-plan-training; a
// described machine (not measured here) has the same fields with
// "measured": false. The model file: an architecture ("gpt" or "llama")
// and its sizes as JSON. The ranked
// plans as JSON (plans_document). docs/07-choosing-a-strategy.md shows each.

#include <shardmesh/models/gpt_description.hpp>
#include <shardmesh/models/llama_description.hpp>
#include <shardmesh/plan/hardware_model.hpp>
#include <shardmesh/plan/memory_model.hpp>
#include <shardmesh/plan/time_model.hpp>
#include <shardmesh/plan/training_plan.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace planner_tool {

// The JSON object in `path`; shardmesh::invalid_option_error naming the file (as a `kind`) if there is none.
[[nodiscard]] nlohmann::ordered_json object_in(std::string const& kind, std::string const& path);

[[nodiscard]] std::string hardware_json(shardmesh::parallel::hardware_model const& h);
// Throws shardmesh::invalid_option_error naming the file and what is wrong in it.
[[nodiscard]] shardmesh::parallel::hardware_model read_hardware(std::string const& path);
// A model file's architecture and sizes.
using model_config = std::variant<shardmesh::parallel::gpt_config, shardmesh::parallel::llama_config>;

// {"architecture": "gpt", "vocabulary": 50304, "sequence": 1024, "hidden": 768, "heads": 12,
//  "head_size": 64, "ffn": 3072, "layers": 12, "sequence_parallel": false}, or "llama" with also
// "kv_heads" (dividing "heads"), "rope_base" (default 10000) and "tied_embeddings" (false: the head is
// untied; true is refused). The same errors, naming the field that is missing, not a whole number, 0 or
// inconsistent, and an architecture it does not know.
[[nodiscard]] model_config read_model(std::string const& path);
[[nodiscard]] std::shared_ptr<shardmesh::parallel::model_description const> describe(model_config const& model);

// One plan as the planner judged it: its predicted memory per rank (the
// largest over the ranks) and step time, or why it was dropped.
struct judged_plan {
  shardmesh::parallel::training_plan plan;
  shardmesh::parallel::state_memory memory;  // the largest of each category over the ranks
  std::size_t memory_total = 0;              // the largest total over the ranks
  double mfu = 0;                            // model flops utilisation (time_model.hpp's model_flops_utilisation)
  shardmesh::parallel::step_time time;
  std::string dropped;  // empty: feasible
};

// Every plan as JSON: its dimensions, predicted memory and step time (or why it was dropped), and with
// `with_crossings` what it sends between devices (plan_crossings.hpp; some 30 entries a plan).
[[nodiscard]] nlohmann::ordered_json plans_document(model_config const& model,
                                                    shardmesh::parallel::training_problem const& problem,
                                                    shardmesh::parallel::hardware_model const& hardware,
                                                    std::size_t capacity, std::vector<judged_plan> const& plans,
                                                    shardmesh::parallel::memory_model const& memory,
                                                    bool with_crossings);

}  // namespace planner_tool
