// Training side by side with PyTorch: the GPTs of bench/training_models.json
// trained here, and by PyTorch in bench/torch_training.py, from the same
// initial weights, on the same batches, with the same AdamW and clipping
// (support/synthetic_gpt.hpp draws both):
//
//   train/<model>/<run>/shardmesh  run: 1rank (the whole global batch on one
//       rank) or dp<n>_zero<s> (data-parallel over the n ranks, ZeRO stage
//       s, the global batch split evenly; buckets of 25 MiB, as DDP's)
//   train/<model>/<run>/shardmesh_bf16  the same in bf16 (float master
//       weights, gradients and optimizer state), against the float run
//
// Time: the median over the timed steps of the slowest rank's step.
// Counters: loss_<i>, the loss of step i, warm-up steps included
// (bench/report.py compares them with PyTorch's); samples_per_second; and
// for data-parallel runs the overlap measurement of support/timed_training.hpp
// (the same step with every reduction after backward, on a second copy of
// the model, alternately): compute_ms, communication_ms, exposed_share.
#include "deferred_registration.hpp"
#include "synthetic_gpt.hpp"
#include "timed_training.hpp"

#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;

struct suite {
  std::size_t global_batch = 0, warmup_steps = 0, timed_steps = 0;
  parallel::adamw method;
  double clip_norm = 0;
  std::vector<std::pair<std::string, parallel::gpt_config>> models;
};

suite read_suite() {
  std::ifstream in(SHARDMESH_TRAINING_MODELS);
  if (!in) throw std::runtime_error(std::string("cannot read ") + SHARDMESH_TRAINING_MODELS);
  auto const j = nlohmann::json::parse(in);
  suite s;
  s.global_batch = j.at("global_batch");
  s.warmup_steps = j.at("warmup_steps");
  s.timed_steps = j.at("timed_steps");
  auto const& a = j.at("adamw");
  s.method = {.lr = a.at("lr"),
              .beta1 = a.at("beta1"),
              .beta2 = a.at("beta2"),
              .eps = a.at("eps"),
              .weight_decay = a.at("weight_decay")};
  s.clip_norm = j.at("clip_norm");
  for (auto const& m : j.at("models"))
    s.models.emplace_back(m.at("name"), parallel::gpt_config{.vocabulary = m.at("vocabulary"),
                                                             .sequence = m.at("sequence"),
                                                             .hidden = m.at("hidden"),
                                                             .heads = m.at("heads"),
                                                             .head_size = m.at("head_size"),
                                                             .ffn = m.at("ffn"),
                                                             .layers = m.at("layers")});
  return s;
}

// A model computing in T and its trainer on the world's ranks, data-parallel ("dp").
template <class T>
struct training_run {
  using model_type = parallel::gpt<T, host>;
  using trainer_type = parallel::trainer<model_type>;
  training_run(device_mesh const& mesh, parallel::gpt_config const& config, parallel::training_options const& options)
      : model(mesh, config, synthetic_values(config)), trainer(model, mesh, options) {}
  model_type model;
  trainer_type trainer;

  // Step i's micro-batch: this rank's share of the global batch.
  typename trainer_type::micro_batch step_batch(device_mesh const& mesh, std::size_t global_batch,
                                                std::size_t step) const {
    parallel::gpt_config const& c = model.config();
    synthetic_batch const b = synthetic_tokens(c, step * global_batch, global_batch);
    layout const& ids = model.layouts().ids;
    return {distribute<host>(mesh, ids, b.ids), distribute<host>(mesh, ids, b.targets)};
  }
};

template <class T>
void train_case(benchmark::State& state, suite const& s, parallel::gpt_config const& config,
                parallel::zero_stage stage) {
  using run_type = training_run<T>;
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", dynamic_extent}, {"tp", 1}});
  bool const data_parallel = mesh.shape()[0].extent > 1;
  parallel::training_options options{.stage = stage, .method = s.method, .clip_norm = s.clip_norm};
  run_type run(mesh, config, options);
  std::optional<run_type> sequential;  // the same steps with every reduction after backward
  if (data_parallel) {
    options.overlap = false;
    sequential.emplace(mesh, config, options);
  }
  std::vector<double> steps;
  overlap_measurement measured;
  std::size_t const total = s.warmup_steps + s.timed_steps;
  for (auto _ : state) {
    for (std::size_t i = 0; i < total; ++i) {
      std::vector<typename run_type::trainer_type::micro_batch> const batch{run.step_batch(mesh, s.global_batch, i)};
      timed_step_result const r = timed_step(run.trainer, batch);
      state.counters["loss_" + std::to_string(i)] = r.loss;
      if (sequential) {
        timed_step_result const after = timed_step(sequential->trainer, batch);
        if (i >= s.warmup_steps) measured.add(r.seconds, after);
      }
      if (i >= s.warmup_steps) steps.push_back(r.seconds);
    }
    state.SetIterationTime(median(steps));
  }
  if (data_parallel) measured.report(state);
  state.counters["samples_per_second"] = static_cast<double>(s.global_batch) / median(steps);
}

void register_all() {
  static suite const s = read_suite();
  std::size_t const n = world_size();
  std::vector<parallel::zero_stage> stages{parallel::zero_stage::none};
  if (n > 1)
    stages = {parallel::zero_stage::none, parallel::zero_stage::optimizer_state, parallel::zero_stage::gradients,
              parallel::zero_stage::parameters};
  for (auto const& [name, config] : s.models)
    for (parallel::zero_stage stage : stages) {
      std::string const run =
          n == 1 ? "1rank" : "dp" + std::to_string(n) + "_zero" + std::to_string(static_cast<int>(stage));
      auto const add = [&](std::string const& impl, auto run_case) {
        benchmark::RegisterBenchmark(
            "train/" + name + "/" + run + "/" + impl,
            [&config, stage, run_case](benchmark::State& state) { run_case(state, s, config, stage); })
            ->UseManualTime()
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
      };
      add("shardmesh", train_case<float>);
      add("shardmesh_bf16", train_case<bf16>);
    }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
