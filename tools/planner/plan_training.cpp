// shardmesh-plan-training: model + batch + hardware in, ranked execution
// plans out. Every plan of the search space (training_plan.hpp) with the
// given global batch on the given ranks is sized by the memory model and,
// if it fits, timed by the time model; the table ranks them by predicted
// step time, --json prints every plan (dropped ones with their reason; with
// --crossings, what each sends between devices), --pictures draws memory against step
// time and the best plans' parts, and --html writes the plan page
// (plan_page.hpp), with a training run's --report beside its plan.
//
//   shardmesh-plan-training --model gpt.json --global-batch 64 --ranks 8 --hardware hardware-8.json
//
// Predictions for a described machine ("measured": false in its hardware
// file) are labelled as such.
#include "pictures.hpp"
#include "plan_page.hpp"
#include "planner_files.hpp"

#include <shardmesh/errors.hpp>
#include <shardmesh/plan/memory_model.hpp>
#include <shardmesh/plan/time_model.hpp>
#include <shardmesh/plan/training_plan.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace shardmesh::parallel;
using planner_tool::judged_plan;

std::string mib(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1 << 20));
  return text;
}
std::string ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", seconds * 1e3);
  return text;
}

// Every candidate, sized and (if it fits) timed; feasible first, fastest first.
std::vector<judged_plan> judge(training_problem const& problem, memory_model const& memory, time_model const& time,
                               hardware_model const& hardware, std::size_t capacity) {
  double const model_flops = model_flops_per_step(*problem.model, problem.global_batch);
  std::vector<judged_plan> out;
  for (training_plan const& plan : candidate_plans(problem)) {
    judged_plan j{plan, {}, 0, 0, {}, {}};
    // Rank (dp 0, stage s, tp 0) holds each stage's largest blocks: block
    // distributions give coordinate 0 the rounded-up share.
    for (std::size_t s = 0; s < plan.pp; ++s) {
      state_memory const m = memory.state(plan, s * plan.tp, 2);
      j.memory.parameters = std::max(j.memory.parameters, m.parameters);
      j.memory.gradients = std::max(j.memory.gradients, m.gradients);
      j.memory.optimizer_state = std::max(j.memory.optimizer_state, m.optimizer_state);
      j.memory.activations = std::max(j.memory.activations, m.activations);
      j.memory_total = std::max(j.memory_total, m.parameters + m.gradients + m.optimizer_state + m.activations);
    }
    if (capacity != 0 && j.memory_total > capacity)
      j.dropped = "needs " + mib(j.memory_total) + " MiB per rank (parameters " + mib(j.memory.parameters) +
                  ", gradients " + mib(j.memory.gradients) + ", optimizer state " + mib(j.memory.optimizer_state) +
                  ", activations " + mib(j.memory.activations) + "), over the capacity of " + mib(capacity) + " MiB";
    else
      j.time = time.predict(plan);
    j.mfu = model_flops_utilisation(model_flops, plan, hardware, j.time.total());
    out.push_back(j);
  }
  std::stable_sort(out.begin(), out.end(), [](judged_plan const& a, judged_plan const& b) {
    if (a.dropped.empty() != b.dropped.empty()) return a.dropped.empty();
    return a.dropped.empty() && a.time.total() < b.time.total();
  });
  return out;
}

void print_table(std::vector<judged_plan> const& plans, std::size_t top) {
  std::printf("%4s  %-58s %9s %9s %9s %9s %9s %6s %10s\n", "#", "plan", "step ms", "compute", "bubble", "dp comm",
              "update", "MFU", "memory MiB");
  std::size_t shown = 0;
  for (judged_plan const& p : plans) {
    if (!p.dropped.empty() || shown == top) break;
    ++shown;
    char mfu[16];
    std::snprintf(mfu, sizeof mfu, "%.0f%%", 100 * p.mfu);
    std::printf("%4zu  %-58s %9s %9s %9s %9s %9s %6s %10s\n", shown, to_string(p.plan).c_str(),
                ms(p.time.total()).c_str(), ms(p.time.compute).c_str(), ms(p.time.bubble).c_str(),
                ms(p.time.data_parallel).c_str(), ms(p.time.optimizer).c_str(), mfu, mib(p.memory_total).c_str());
  }
}

int run(int argc, char** argv) {
  std::string model_file, hardware_file, pictures, html, report, precision_name = "any", recompute_name = "any",
                                                                 gradients_name = "fp32";
  std::size_t global_batch = 0, ranks = 0, memory_bytes = 0, top = 10, max_virtual = 4, max_cp = 1;
  bool json = false, crossings = false;
  CLI::App app{
      "Ranks the ways to train a GPT on a machine: every (dp, tp, pp, ZeRO stage, micro-batch, "
      "micro-batches, schedule, v, precision, recomputation, gradient type) for the global batch on the ranks, the "
      "plans over the "
      "memory capacity dropped with their reason, the rest by predicted step time, with their model flops "
      "utilisation.",
      "shardmesh-plan-training"};
  app.add_option("--model", model_file,
                 "the model (JSON: architecture gpt or llama, vocabulary, sequence, hidden, heads, head_size, ffn, "
                 "layers; llama: kv_heads, rope_base, and optionally context (\"ring\" or \"all-to-all\"), experts, "
                 "expert_every, top_k, capacity)")
      ->required()
      ->type_name("FILE");
  app.add_option("--global-batch", global_batch, "samples (sequences) per step")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--ranks", ranks, "ranks to train on")->required()->check(CLI::PositiveNumber);
  app.add_option("--hardware", hardware_file, "the hardware file (shardmesh-calibrate's, or a description)")
      ->required()
      ->type_name("FILE");
  app.add_option("--memory", memory_bytes, "bytes per rank (default: the hardware file's; 0: no limit)")
      ->type_name("BYTES");
  app.add_option("--top", top, "plans the table shows")->capture_default_str();
  app.add_option("--max-virtual", max_virtual, "the most chunks per stage interleaving may use")->capture_default_str();
  app.add_option("--max-cp", max_cp,
                 "the largest context-parallel degree searched, for models that split the sequence (1: none)")
      ->capture_default_str();
  app.add_option("--precision", precision_name, "the run's precision (fp32, bf16, fp16), or any: searched")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "any"}))
      ->capture_default_str();
  app.add_option("--recompute", recompute_name,
                 "the run's activation recomputation (none, selective, full), or any: searched")
      ->check(CLI::IsMember({"none", "selective", "full", "any"}))
      ->capture_default_str();
  app.add_option("--gradients", gradients_name,
                 "what gradients are kept and reduced in (fp32, or bf16 with a bf16 model), or any: searched")
      ->check(CLI::IsMember({"fp32", "bf16", "any"}))
      ->capture_default_str();
  app.add_flag("--json", json, "print every plan as JSON instead of the table");
  app.add_flag("--crossings", crossings,
               "with --json, also what each plan sends between devices: tensor, collective, group, calls and bytes "
               "per step")
      ->needs("--json");
  app.add_option("--pictures", pictures,
                 "write PREFIX-memory-time.svg and PREFIX-parts.svg (and .png where rsvg-convert is installed)")
      ->type_name("PREFIX");
  app.add_option("--html", html, "write the plan page: every plan on the model's diagram, in one HTML file")
      ->type_name("FILE");
  app.add_option("--report", report, "a training run's report (train_gpt --report) to show beside its plan")
      ->type_name("FILE")
      ->needs("--html");
  CLI11_PARSE(app, argc, argv);

  hardware_model const hardware = planner_tool::read_hardware(hardware_file);
  planner_tool::model_config const model = planner_tool::read_model(model_file);
  training_problem const problem{planner_tool::describe(model),
                                 global_batch,
                                 ranks,
                                 max_virtual,
                                 parse_precision(precision_name),
                                 parse_recompute_mode(recompute_name),
                                 parse_precision(gradients_name),
                                 max_cp};
  std::size_t const capacity = app.count("--memory") != 0 ? memory_bytes : hardware.memory_per_rank;
  memory_model const memory(*problem.model);
  time_model const time(memory, hardware);
  std::vector<judged_plan> const plans = judge(problem, memory, time, hardware, capacity);
  if (!html.empty()) {
    std::optional<nlohmann::ordered_json> run;
    if (!report.empty()) run = planner_tool::object_in("report", report);
    std::ofstream out(html);
    out << planner_tool::plan_page(
        planner_tool::plans_document(model, problem, hardware, capacity, plans, memory, true), memory, time, plans,
        run);
    if (!out) throw shardmesh::invalid_option_error("cannot write " + html);
  }
  if (json) {
    std::cout << planner_tool::plans_document(model, problem, hardware, capacity, plans, memory, crossings).dump(2)
              << "\n";
  } else {
    std::size_t const feasible = static_cast<std::size_t>(
        std::count_if(plans.begin(), plans.end(), [](judged_plan const& p) { return p.dropped.empty(); }));
    std::printf("%s: %zu plans, %zu within %s MiB per rank%s\n", hardware.machine.c_str(), plans.size(), feasible,
                capacity != 0 ? mib(capacity).c_str() : "unlimited",
                hardware.measured ? "" : " (PREDICTION: the machine is described, not measured)");
    if (hardware.measured && hardware.ranks != ranks)
      std::printf("note: calibrated on %zu ranks, asked about %zu\n", hardware.ranks, ranks);
    std::printf("memory: parameters, gradients, optimizer state and activations; workspace not counted\n\n");
    print_table(plans, top);
  }
  if (!pictures.empty()) {
    for (auto const& [name, svg] :
         {std::pair<std::string, std::string>{pictures + "-memory-time.svg", planner_tool::memory_time_svg(plans)},
          {pictures + "-parts.svg", planner_tool::parts_svg(plans, 5)}}) {
      std::ofstream(name) << svg;
      std::string const png = name.substr(0, name.size() - 4) + ".png";
      std::string const convert =
          "command -v rsvg-convert >/dev/null && rsvg-convert -b white -o '" + png + "' '" + name + "'";
      if (std::system(convert.c_str()) != 0)
        std::fprintf(stderr, "wrote %s (no rsvg-convert for the PNG)\n", name.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (shardmesh::error const& e) {
    std::cerr << "shardmesh-plan-training: " << e.what() << std::endl;
    return 1;
  }
}
