// The planner's model of the GPT against the real thing: the declared
// stages (gpt_description.hpp) name, size and place every parameter as the
// constructed model does, on every mesh of the world's ranks; each stage's
// declared redistributions, planned by the algebra, issue exactly the
// collectives and bytes the model's forward and backward do; and for every
// candidate plan of the world's ranks (every mesh dp x pp x tp, ZeRO stage,
// schedule and chunk count, micro-batch counts 1 and 2 per pipeline stage),
// each rank's predicted parameters, gradients, optimizer state and
// activations equal the most its memory ledger held in a training step,
// byte for byte, with and without sequence parallelism. The model
// has 3 heads and a hidden size of 10, so tensor and state sharding are
// uneven; the embedding and the head make the first and last stages heavier.
#include "mpi_test.hpp"
#include "training_reference.hpp"

#include <shardmesh/models/gpt.hpp>
#include <shardmesh/plan/communication_model.hpp>
#include <shardmesh/plan/memory_model.hpp>
#include <shardmesh/plan/training_plan.hpp>
#include <shardmesh/shardmesh.hpp>
#include <shardmesh/train/trainer.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using namespace shardmesh;
using namespace shardmesh::test::training;
using shardmesh::test::by_name;
namespace ref = shardmesh::test::reference;

namespace {

using model = parallel::gpt<float, host>;
using trainer_type = parallel::trainer<model>;

ref::config config_for(std::size_t global) {
  ref::config c = tiny(global);
  c.L = 4;
  return c;
}

parallel::gpt_config gpt_config_of(ref::config const& c) { return {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, false}; }

// The most each category held at once over the step's phases.
std::array<std::size_t, memory_category_count> step_peaks(parallel::memory_report const& r) {
  std::array<std::size_t, memory_category_count> peak{};
  for (parallel::phase_memory const& p : r.phases)
    for (std::size_t c = 0; c < memory_category_count; ++c) peak[c] = std::max(peak[c], p.peak[c]);
  return peak;
}

}  // namespace

TEST_CASE("the declared stages name, size and place every parameter as the model does", "[parallel][planner]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  ref::config const c = config_for(n);
  values const start = by_name(c, ref::init_parameters(c, 3));
  for (std::size_t tp : {std::size_t{1}, n})
    for (bool sequence_parallel : {false, true}) {
      parallel::gpt_config g = gpt_config_of(c);
      g.sequence_parallel = sequence_parallel;
      device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", n / tp}, {"tp", tp}});
      model m(mesh, g, [&](std::string const& name) { return start.at(name); });
      std::vector<parallel::parameter_spec> declared;
      for (parallel::stage_description const& s : parallel::gpt_description(g).stages(mesh.shape(), n))
        declared.insert(declared.end(), s.parameters.begin(), s.parameters.end());
      std::size_t i = 0;
      m.for_each_parameter([&](std::string const& name, auto const& p) {
        INFO("tp=" << tp << " parameter " << name);
        REQUIRE(i < declared.size());
        CHECK(declared[i].name == name);
        CHECK(std::equal(declared[i].extents.begin(), declared[i].extents.end(), p.global_extents().begin()));
        CHECK(p.layout_of() == declared[i].placement);
        ++i;
      });
      CHECK(i == declared.size());
    }
}

TEST_CASE("each stage's declared redistributions are the collectives and bytes the model issues",
          "[parallel][planner]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<std::pair<std::size_t, std::size_t>> meshes{{1, n}, {n, 1}};
  if (n == 4) meshes.emplace_back(2, 2);
  std::size_t const samples = 2 * n;
  ref::config const c = config_for(samples);
  values const start = by_name(c, ref::init_parameters(c, 3));
  batch const b = batch_of_step(c, 0, false);
  for (auto const& [dp, tp] : meshes)
    for (bool sequence_parallel : {false, true}) {
      parallel::gpt_config g = gpt_config_of(c);
      g.sequence_parallel = sequence_parallel;
      device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", dp}, {"tp", tp}});
      model m(mesh, g, [&](std::string const& name) { return start.at(name); });
      // Gradients stay partial on dp, as the trainer accumulates them.
      m.for_each_parameter([&](std::string const&, auto& p) {
        p.accumulate_in(parallel::state_layouts_for(p.compute_layout(), parallel::zero_stage::none, 0).accumulate);
      });
      auto const ids = rows(mesh, m.layouts().ids, b.tokens, {0, samples}, c.T);
      auto const targets = rows(mesh, m.layouts().ids, b.targets, {0, samples}, c.T);
      std::map<std::pair<std::size_t, bool>, comm_counters::table> seen;
      mesh.counters().reset();
      m.trace([&](auto const& e) {
        if (e.before) return;
        seen[{e.stage, e.phase == "backward"}] = mesh.counters().all();
        mesh.counters().reset();
      });
      (void)m.forward(ids, targets);
      m.backward();
      REQUIRE(seen.size() == 2 * (c.L + 3));
      for (auto const& [key, table] : seen) {
        auto const& [stage, in_backward] = key;
        INFO("dp=" << dp << " tp=" << tp << (sequence_parallel ? " sp" : "") << ", stage " << stage
                   << (in_backward ? " backward" : " forward"));
        auto const want =
            parallel::transition_traffic(mesh.shape(), parallel::gpt_stage_transitions(g, mesh.shape(), stage, samples),
                                         in_backward, mesh.rank(), sizeof(float));
        std::size_t counted = 0;
        for (auto const& [kind, count] : table) {
          if (count.calls == 0) continue;
          INFO(kind);
          ++counted;
          auto const it =
              std::find_if(want.begin(), want.end(), [&](auto const& w) { return to_string(w.first) == kind; });
          REQUIRE(it != want.end());
          CHECK(count.calls == it->second.calls);
          CHECK(count.bytes_received == it->second.bytes_received);
        }
        CHECK(counted == want.size());
      }
    }
}

TEST_CASE("predicted parameters, gradients, optimizer state and activations equal the ledger's, rank by rank",
          "[parallel][planner]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  std::size_t const global = 4 * n;
  ref::config const c = config_for(global);
  bool const sequence_parallel = GENERATE(false, true);
  parallel::gpt_config g = gpt_config_of(c);
  g.sequence_parallel = sequence_parallel;
  values const start = by_name(c, ref::init_parameters(c, 3));
  auto const description = std::make_shared<parallel::gpt_description const>(g);
  parallel::memory_model const predict(*description);
  std::size_t runs = 0;
  for (parallel::training_plan const& plan : parallel::candidate_plans({description, global, n, 2})) {
    if (plan.micro_batches > 2 * plan.pp) continue;
    INFO(to_string(plan) << (sequence_parallel ? " sp" : ""));
    device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", plan.dp}, {"pp", plan.pp}, {"tp", plan.tp}});
    device_mesh const stage = mesh.submesh({"dp", "tp"});
    std::size_t const v = plan.virtual_stages, s = mesh.coordinates()[1];
    auto const parts = parallel::partition_layers(c.L, plan.pp * v, parallel::partition_costs(*description));
    std::deque<model> chunks;
    std::vector<model*> pointers;
    for (std::size_t k = 0; k < v; ++k) {
      chunks.emplace_back(stage, g, [&](std::string const& name) { return start.at(name); }, parts[k * plan.pp + s]);
      pointers.push_back(&chunks.back());
    }
    trainer_type train(pointers, mesh, {.stage = plan.zero, .method = parallel::adamw{}, .schedule = plan.schedule});
    batch const b = batch_of_step(c, 0, false);
    std::vector<trainer_type::micro_batch> micro;
    for (std::size_t a = 0; a < plan.micro_batches; ++a) {
      interval const samples{a * plan.micro_batch * plan.dp, (a + 1) * plan.micro_batch * plan.dp};
      micro.push_back({rows(stage, chunks.front().layouts().ids, b.tokens, samples, c.T),
                       rows(stage, chunks.front().layouts().ids, b.targets, samples, c.T)});
    }
    (void)train.step(micro);
    auto const peak = step_peaks(train.memory());
    parallel::state_memory const want = predict.state(plan, mesh.rank(), sizeof(float), 2);
    using enum memory_category;
    CHECK(peak[static_cast<std::size_t>(parameters)] == want.parameters);
    CHECK(peak[static_cast<std::size_t>(gradients)] == want.gradients);
    CHECK(peak[static_cast<std::size_t>(optimizer_state)] == want.optimizer_state);
    CHECK(peak[static_cast<std::size_t>(activations)] == want.activations);
    ++runs;
  }
  CHECK(runs > 0);
}
