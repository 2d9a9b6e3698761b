// The planner's model of the GPT and of the Llama-style model against the
// real thing: the declared stages (decoder_description.hpp and each
// architecture's parameters) name, size and place every parameter as the
// constructed model does, on every mesh of the world's ranks; each stage's
// declared redistributions, planned by the algebra, issue exactly the
// collectives and bytes the model's forward and backward do; and for every
// candidate plan of the world's ranks (on more than 2 ranks, every 4th in the
// default suite and every one in the full suite; every mesh dp x pp x tp, ZeRO stage,
// schedule and chunk count, micro-batch counts 1 and 2 per pipeline stage),
// each rank's predicted parameters, gradients, optimizer state and
// activations equal the most its memory ledger held in a training step,
// byte for byte, with and without sequence parallelism. The GPT has 3
// heads and a hidden size of 10, so tensor and state sharding are uneven;
// the Llama has 4 query heads and one key/value head (held whole by every
// tp rank, its weight gradients reduced over tp); the tests' own residual
// MLP (residual_mlp.hpp, its own description) has blocks of four widths;
// the embedding and the head make the first and last stages heavier. A
// Llama of 8 tokens is checked likewise on every plan with context
// parallelism (cp = 2 and 4 in the ring form, cp = 2 in the all-to-all
// form, beside dp, tp and pp): the ledger's activations fall as 1/cp as
// predicted; and on cp alone and cp x tp its stages issue the collectives
// declared (the all-to-all form's transitions, the gradients' reduction
// over cp) and the ring's point-to-point blocks ring_attention_traffic
// gives, calls and bytes.
#include "exhaustive.hpp"
#include "mpi_test.hpp"
#include "reference_models.hpp"
#include "residual_mlp.hpp"
#include "training_reference.hpp"

#include <shardmesh/models/gpt.hpp>
#include <shardmesh/models/llama.hpp>
#include <shardmesh/plan/communication_model.hpp>
#include <shardmesh/plan/memory_model.hpp>
#include <shardmesh/plan/training_plan.hpp>
#include <shardmesh/shardmesh.hpp>
#include <shardmesh/train/trainer.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace memory_model_test {

using namespace shardmesh;
using namespace shardmesh::test::training;
using shardmesh::test::by_name;
namespace ref = shardmesh::test::reference;

namespace {

// Each model with 4 blocks: its type, its config (with or without
// sequence parallelism), its description, its starting values and a batch
// of `global` samples.
struct gpt_case {
  template <class T>
  using model = parallel::gpt<T, host>;
  static constexpr bool precisions = true;  // trained in every precision and recomputation mode
  using description = parallel::gpt_description;
  static ref::config sizes(std::size_t global) {
    ref::config c = tiny(global);
    c.L = 4;
    return c;
  }
  static parallel::gpt_config config(bool sp) {
    ref::config const c = sizes(1);
    return {c.V, c.T, c.C, c.H, c.D, c.F, c.L, c.eps, sp};
  }
  static values start() { return by_name(sizes(1), ref::init_parameters(sizes(1), 3)); }
  static batch batch_of(std::size_t global) { return batch_of_step(sizes(global), 0, false); }
  static constexpr bool sequence_parallel = true;
};

struct llama_case {
  template <class T>
  using model = parallel::llama<T, host>;
  static constexpr bool precisions = true;
  using description = parallel::llama_description;
  static test::llama_reference::config sizes(std::size_t global) {
    return {.V = 19, .T = 5, .C = 8, .H = 4, .K = 1, .D = 4, .F = 10, .L = 4, .B = global};
  }
  static parallel::llama_config config(bool sp) {
    auto const c = sizes(1);
    return {c.V, c.T, c.C, c.H, c.K, c.D, c.F, c.L, c.eps, c.base, sp};
  }
  static values start() { return test::llama_reference::init(sizes(1), 3); }
  static batch batch_of(std::size_t global) {
    auto const c = sizes(global);
    return {test::llama_reference::tokens(c, 11, 100), test::llama_reference::tokens(c, 11, 200)};
  }
  static constexpr bool sequence_parallel = true;
};

// The Llama of 8 tokens, its attention context-parallel in the form Form where the plan has cp.
template <context_form Form>
struct llama_context_case : llama_case {
  static test::llama_reference::config sizes(std::size_t global) {
    auto c = llama_case::sizes(global);
    c.T = 8;
    return c;
  }
  static parallel::llama_config config(bool sp) {
    auto const c = sizes(1);
    parallel::llama_config out{c.V, c.T, c.C, c.H, c.K, c.D, c.F, c.L, c.eps, c.base, sp};
    out.context = Form;
    return out;
  }
  static values start() { return test::llama_reference::init(sizes(1), 3); }
  static batch batch_of(std::size_t global) {
    auto const c = sizes(global);
    return {test::llama_reference::tokens(c, 11, 100), test::llama_reference::tokens(c, 11, 200)};
  }
  static constexpr bool precisions = false;  // cp's plans in float: the precisions are the other cases'
  static constexpr bool context = true;
};
using llama_ring_case = llama_context_case<context_form::ring>;
using llama_all_to_all_case = llama_context_case<context_form::all_to_all>;

// The tests' own model (residual_mlp.hpp): blocks of MLP widths 6, 15, 4 and 11; no sequence parallelism.
struct residual_case {
  template <class T>
  using model = test::residual::model<T, host>;
  static constexpr bool precisions = false;  // written in float
  using description = test::residual::description;
  static test::residual_reference::config sizes() { return {.V = 19, .T = 5, .C = 8, .widths = {6, 15, 4, 11}}; }
  static test::residual::config config(bool) {
    auto const c = sizes();
    return {c.V, c.T, c.C, c.widths.size(), c.widths, c.eps, false};
  }
  static values start() { return test::llama_reference::init(test::residual_reference::shapes(sizes()), 3); }
  static batch batch_of(std::size_t global) {
    std::size_t const n = global * sizes().T;
    return {test::llama_reference::tokens(n, 19, 11, 100), test::llama_reference::tokens(n, 19, 11, 200)};
  }
  static constexpr bool sequence_parallel = false;
};

// The most each category held at once over the step's phases.
std::array<std::size_t, memory_category_count> step_peaks(parallel::memory_report const& r) {
  std::array<std::size_t, memory_category_count> peak{};
  for (parallel::phase_memory const& p : r.phases)
    for (std::size_t c = 0; c < memory_category_count; ++c) peak[c] = std::max(peak[c], p.peak[c]);
  return peak;
}

}  // namespace

TEMPLATE_TEST_CASE("the declared stages name, size and place every parameter as the model does", "[parallel][planner]",
                   gpt_case, llama_case, residual_case) {
  auto const n = static_cast<std::size_t>(test::world_size());
  values const start = TestType::start();
  for (std::size_t tp : {std::size_t{1}, n})
    for (bool sequence_parallel : {false, TestType::sequence_parallel}) {
      auto const g = TestType::config(sequence_parallel);
      device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", n / tp}, {"tp", tp}});
      typename TestType::template model<float> m(mesh, g, [&](std::string const& name) { return start.at(name); });
      std::vector<parallel::parameter_spec> declared;
      for (parallel::stage_description const& s : typename TestType::description(g).stages(mesh.shape(), n))
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

TEMPLATE_TEST_CASE("each stage's declared redistributions are the collectives and bytes the model issues",
                   "[parallel][planner]", gpt_case, llama_case, residual_case, llama_ring_case, llama_all_to_all_case) {
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<mesh_shape> meshes;
  if constexpr (requires { TestType::context; }) {  // cp alone, and beside tp
    if (n > 1 && 8 % (2 * n) == 0) meshes.push_back(mesh_shape{{"dp", 1}, {"cp", n}, {"tp", 1}});
    if (n == 4) meshes.push_back(mesh_shape{{"dp", 1}, {"cp", 2}, {"tp", 2}});
  } else {
    meshes = {mesh_shape{{"dp", 1}, {"tp", n}}, mesh_shape{{"dp", n}, {"tp", 1}}};
    if (n == 4) meshes.push_back(mesh_shape{{"dp", 2}, {"tp", 2}});
  }
  std::size_t const samples = 2 * n;
  values const start = TestType::start();
  batch const b = TestType::batch_of(samples);
  std::size_t const T = TestType::config(false).sequence, L = TestType::config(false).layers;
  for (mesh_shape const& shape : meshes)
    for (bool sequence_parallel : {false, TestType::sequence_parallel}) {
      auto const g = TestType::config(sequence_parallel);
      device_mesh const mesh(MPI_COMM_WORLD, shape);
      typename TestType::template model<float> m(mesh, g, [&](std::string const& name) { return start.at(name); });
      // Gradients stay partial on dp, as the trainer accumulates them.
      m.for_each_parameter([&](std::string const&, auto& p) {
        p.accumulate_in(parallel::state_layouts_for(p.compute_layout(), parallel::zero_stage::none, 0).accumulate);
      });
      auto const ids = rows(mesh, m.layouts().ids, b.tokens, {0, samples}, T);
      auto const targets = rows(mesh, m.layouts().ids, b.targets, {0, samples}, T);
      std::map<std::pair<std::size_t, bool>, comm_counters::table> seen;
      mesh.counters().reset();
      m.trace([&](auto const& e) {
        if (e.before) return;
        seen[{e.stage, e.phase == "backward"}] = mesh.counters().all();
        mesh.counters().reset();
      });
      (void)m.forward(ids, targets);
      m.backward();
      REQUIRE(seen.size() == 2 * (L + 3));
      for (auto const& [key, table] : seen) {
        auto const& [stage, in_backward] = key;
        INFO(to_string(shape).view() << (sequence_parallel ? " sp" : "") << ", stage " << stage
                                     << (in_backward ? " backward" : " forward"));
        // The transitions as the algebra plans them, and the ring's blocks (point to point, in float).
        parallel::stage_description const declared =
            typename TestType::description(g).stages(mesh.shape(), samples)[stage];
        std::map<std::string, parallel::collective_traffic> want;
        for (auto const& [kind, traffic] :
             parallel::transition_traffic(mesh.shape(), declared.transitions, in_backward, mesh.rank(), sizeof(float)))
          want[std::string(to_string(kind))] = traffic;
        for (parallel::exchange_spec const& e : declared.exchanges) {
          if (e.in_backward != in_backward || e.calls == 0) continue;
          parallel::collective_traffic& w = want["point_to_point"];
          w.calls += e.calls;
          w.bytes_received += static_cast<std::size_t>(e.elements + e.statistic_elements) * sizeof(float);
        }
        std::size_t counted = 0;
        for (auto const& [kind, count] : table) {
          if (count.calls == 0) continue;
          INFO(kind);
          ++counted;
          auto const it = want.find(std::string(kind));
          CHECK(count.calls == it->second.calls);
          CHECK(count.bytes_received == it->second.bytes_received);
        }
        CHECK(counted == want.size());
      }
    }
}

namespace {

// One step of `plan` with the model computing in T: the ledger's peaks against the memory model's, rank by rank.
template <class TestType, class T>
void check_plan(parallel::training_plan const& plan, parallel::memory_model const& predict, bool sequence_parallel,
                std::size_t global) {
  auto g = TestType::config(sequence_parallel);
  if constexpr (requires { g.recompute; }) g.recompute = plan.recompute;
  values const start = TestType::start();
  using model = typename TestType::template model<T>;
  using trainer_type = parallel::trainer<model>;
  mesh_shape shape = parallel::memory_model::stage_mesh(plan);  // dp (cp, ep) tp: pp goes before tp
  std::size_t const last = shape.ndim++;
  shape.axes[last] = shape.axes[last - 1];
  shape.axes[last - 1] = {"pp", plan.pp};
  device_mesh const mesh(MPI_COMM_WORLD, shape);
  std::size_t const pp = mesh.shape().find("pp");
  device_mesh const stage = mesh.submesh(axis_set::all(mesh.shape().ndim) - axis_set::of(pp));
  std::size_t const v = plan.virtual_stages, s = mesh.coordinates()[pp];
  auto const parts = parallel::partition_layers(g.layers, plan.pp * v, parallel::partition_costs(predict.model()));
  std::deque<model> chunks;
  std::vector<model*> pointers;
  for (std::size_t k = 0; k < v; ++k) {
    chunks.emplace_back(stage, g, [&](std::string const& name) { return start.at(name); }, parts[k * plan.pp + s]);
    pointers.push_back(&chunks.back());
  }
  trainer_type train(pointers, mesh,
                     {.stage = plan.zero,
                      .method = parallel::adamw{},
                      .schedule = plan.schedule,
                      .gradient_type = plan.gradients,
                      .gradient_reduction = plan.gradients});
  batch const b = TestType::batch_of(global);
  std::vector<typename trainer_type::micro_batch> micro;
  for (std::size_t a = 0; a < plan.micro_batches; ++a) {
    interval const samples{a * plan.micro_batch * plan.batch_replicas(),
                           (a + 1) * plan.micro_batch * plan.batch_replicas()};
    micro.push_back({rows(stage, chunks.front().layouts().ids, b.tokens, samples, g.sequence),
                     rows(stage, chunks.front().layouts().ids, b.targets, samples, g.sequence)});
  }
  (void)train.step(micro);
  auto const peak = step_peaks(train.memory());
  parallel::state_memory const want = predict.state(plan, mesh.rank(), 2);
  using enum memory_category;
  CHECK(peak[static_cast<std::size_t>(parameters)] == want.parameters);
  CHECK(peak[static_cast<std::size_t>(gradients)] == want.gradients);
  CHECK(peak[static_cast<std::size_t>(optimizer_state)] == want.optimizer_state);
  CHECK(peak[static_cast<std::size_t>(activations)] == want.activations);
}

}  // namespace

TEMPLATE_TEST_CASE("predicted parameters, gradients, optimizer state and activations equal the ledger's, rank by rank",
                   "[parallel][planner]", gpt_case, llama_case, residual_case, llama_ring_case, llama_all_to_all_case) {
  auto const n = static_cast<std::size_t>(test::world_size());
  std::size_t const global = 4 * n;
  bool const sequence_parallel = GENERATE(false, true) && TestType::sequence_parallel;
  auto const description = std::make_shared<typename TestType::description const>(TestType::config(sequence_parallel));
  parallel::memory_model const predict(*description);
  // Every precision, recomputation and gradient type the model has (the tests' own model: float, none), on every
  // plan.
  parallel::training_problem problem{description, global, n, 2, std::nullopt, std::nullopt, std::nullopt};
  if (!TestType::precisions) problem.compute = parallel::precision::fp32;
  if (!TestType::precisions) problem.recompute = parallel::recompute_mode::none;
  problem.max_context_parallel = n;
  // Beyond 2 ranks, the default suite checks every 4th plan (the context cases, which add cp to every other
  // dimension, every 16th, and every 2nd on 2 ranks); the full suite every one (exhaustive.hpp).
  std::size_t stride = n > 2 ? 4 : 1;
  if constexpr (requires { TestType::context; }) stride = n > 2 ? 16 : 2;
  stride = test::case_stride(stride);
  std::size_t runs = 0, index = 0;
  for (parallel::training_plan const& plan : parallel::candidate_plans(problem)) {
    if (plan.micro_batches > 2 * plan.pp) continue;
    if constexpr (requires { TestType::context; }) {  // its plans with cp; the others are llama_case's
      if (plan.cp == 1) continue;
    }
    if (index++ % stride != 0) continue;
    INFO(to_string(plan) << (sequence_parallel ? " sp" : ""));
    if constexpr (TestType::precisions) {
      if (plan.compute == parallel::precision::bf16)
        check_plan<TestType, bf16>(plan, predict, sequence_parallel, global);
      if (plan.compute == parallel::precision::fp16)
        check_plan<TestType, fp16>(plan, predict, sequence_parallel, global);
    }
    if (plan.compute == parallel::precision::fp32)
      check_plan<TestType, float>(plan, predict, sequence_parallel, global);
    ++runs;
  }
  CHECK(runs > 0);
}

}  // namespace memory_model_test
