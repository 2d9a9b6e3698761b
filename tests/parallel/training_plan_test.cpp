// The planner's search space and memory model, without MPI: the candidate
// plans are exactly the valid ones (against a brute force over every tuple
// with the conditions written out here), each refusal says why, the search
// space of 64 ranks and a 32-layer model is enumerated, sized and timed in
// under a second, the memory model's totals obey ZeRO's table, a hardware
// model fits and looks up what calibration measured, and the time model
// charges each plan for what it does, the library's own costs included;
// context and expert parallelism are plan dimensions where the model takes
// them (refused with the model's reason where it does not), activations
// per rank fall as 1/cp and the experts' state as 1/ep, and the ring's and
// the experts' exchanges are priced.
#include <shardmesh/models/gpt_description.hpp>
#include <shardmesh/models/llama_description.hpp>
#include <shardmesh/plan/hardware_model.hpp>
#include <shardmesh/plan/memory_model.hpp>
#include <shardmesh/plan/time_model.hpp>
#include <shardmesh/plan/training_plan.hpp>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

using namespace shardmesh;
using namespace shardmesh::parallel;

namespace {

gpt_config small(std::size_t layers, std::size_t heads) {
  return {.vocabulary = 50, .sequence = 5, .hidden = 10, .heads = heads, .head_size = 4, .ffn = 18, .layers = layers};
}

std::shared_ptr<model_description const> gpt(gpt_config const& c) { return std::make_shared<gpt_description const>(c); }

// A one-rank stage mesh and micro-batch: the stages of a model as the partition weighs them.
std::vector<stage_description> stages_of(model_description const& model) {
  return model.stages(mesh_shape{{"tp", 1}}, 1);
}

// Validity as the planner's documentation states it, written independently.
bool valid(training_problem const& problem, training_plan const& p) {
  gpt_config const& c = dynamic_cast<gpt_description const&>(*problem.model).config();
  bool const interleaved = p.schedule == schedule_kind::interleaved;
  return p.dp * p.tp * p.pp == problem.ranks && p.micro_batch * p.micro_batches * p.dp == problem.global_batch &&
         p.tp <= c.heads && p.pp * p.virtual_stages <= c.layers && (p.dp > 1 || p.zero == zero_stage::none) &&
         (p.pp > 1 || (p.schedule == schedule_kind::one_f_one_b && p.virtual_stages == 1)) &&
         (interleaved ? p.virtual_stages >= 2 && p.micro_batches % p.pp == 0 : p.virtual_stages == 1) &&
         p.virtual_stages <= problem.max_virtual_stages;
}

// A machine of 64 cores with every rate given: 1e10 flop/s, 1e10 B/s elementwise, and
// every collective alpha + beta x bytes with the given costs.
hardware_model machine(double alpha, double beta) {
  hardware_model h;
  h.cores = 64;  // a core per rank
  h.gemm = {{1, 1, 1, 1e10}};
  h.elementwise_bytes_per_second = 1e10;
  for (collective_kind k : collective_kinds)
    for (std::size_t g : {2, 4, 8}) h.collectives.push_back({k, g, {alpha, beta}});
  return h;
}

}  // namespace

TEST_CASE("the candidate plans are exactly the valid ones, each once", "[parallel][planner]") {
  for (std::size_t ranks : {1, 2, 3, 4, 6, 8})
    for (std::size_t global : {1, 4, 6, 8})
      for (std::size_t layers : {1, 2, 4}) {
        training_problem const problem{gpt(small(layers, 3)), global, ranks, 3};
        INFO(ranks << " ranks, global batch " << global << ", " << layers << " layers");
        std::vector<training_plan> want;
        for (std::size_t dp = 1; dp <= ranks; ++dp)
          for (std::size_t tp = 1; tp <= ranks; ++tp)
            for (std::size_t pp = 1; pp <= ranks; ++pp)
              for (unsigned z = 0; z < 4; ++z)
                for (std::size_t b = 1; b <= global; ++b)
                  for (std::size_t m = 1; m <= global; ++m)
                    for (auto kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::interleaved,
                                      schedule_kind::zero_bubble})
                      for (std::size_t v = 1; v <= 4; ++v) {
                        training_plan const p{dp, tp, pp, static_cast<zero_stage>(z), b, m, kind, v};
                        CHECK(valid(problem, p) == training_plan_error(problem, p).empty());
                        if (valid(problem, p)) want.push_back(p);
                      }
        std::vector<training_plan> const got = candidate_plans(problem);
        CHECK(got.size() == want.size());
        for (training_plan const& p : want) CHECK(std::count(got.begin(), got.end(), p) == 1);
      }
}

TEST_CASE("a plan that cannot run says why", "[parallel][planner]") {
  training_problem const problem{gpt(small(4, 3)), 8, 4};
  auto const error = [&](training_plan const& p) { return training_plan_error(problem, p); };
  CHECK(error({.dp = 2, .tp = 1, .pp = 1, .micro_batch = 4, .micro_batches = 1}) ==
        "plan: dp x cp x ep x tp x pp = 2, not the 4 ranks");
  CHECK(error({.dp = 4, .micro_batch = 1, .micro_batches = 1}) ==
        "plan: micro-batch x micro-batches x dp x ep = 4, not the global batch of 8");
  CHECK(error({.tp = 4, .micro_batch = 8}) == "plan: tp = 4 is more than the 3 heads");
  CHECK(error({.pp = 4,
               .micro_batch = 2,
               .micro_batches = 4,
               .schedule = schedule_kind::interleaved,
               .virtual_stages = 2}) == "plan: 8 pipeline chunks for 4 blocks");
  CHECK(error({.dp = 1, .tp = 2, .pp = 2, .zero = zero_stage::gradients, .micro_batch = 8}) ==
        "plan: ZeRO stages shard over dp; with dp = 1 use stage 0");
  CHECK(error({.dp = 2, .tp = 2, .micro_batch = 4, .schedule = schedule_kind::gpipe}) ==
        "plan: one pipeline stage has no schedule to choose; use 1f1b with v = 1");
  CHECK(error({.dp = 2, .pp = 2, .micro_batch = 4, .schedule = schedule_kind::interleaved}) ==
        "plan: interleaving needs v >= 2 chunks per stage");
  std::string const refused =
      error({.dp = 2, .pp = 2, .micro_batch = 4, .schedule = schedule_kind::interleaved, .virtual_stages = 2});
  CHECK(refused.find("multiple") != std::string::npos);  // m = 1 for p = 2: the generator's reason
  CHECK(error({.dp = 2,
               .pp = 2,
               .micro_batch = 2,
               .micro_batches = 2,
               .schedule = schedule_kind::interleaved,
               .virtual_stages = 2})
            .empty());
}

namespace {

// A Llama of 8 tokens (cut into 2 cp chunks for cp up to 4), with 4 experts in every other block when asked.
llama_config long_llama(std::size_t experts, context_form form = context_form::ring) {
  llama_config c{
      .vocabulary = 50, .sequence = 8, .hidden = 8, .heads = 4, .kv_heads = 2, .head_size = 4, .ffn = 12, .layers = 4};
  c.context = form;
  c.experts = {.count = experts, .every = 2, .top_k = 2};
  return c;
}

std::shared_ptr<model_description const> llama(llama_config const& c) {
  return std::make_shared<llama_description const>(c);
}

}  // namespace

TEST_CASE("cp and ep are plan dimensions where the model takes them, refused with its reason where not",
          "[parallel][planner]") {
  auto const error = [](std::shared_ptr<model_description const> m, training_plan const& p) {
    training_problem problem{std::move(m), 8, 4};
    problem.max_context_parallel = 4;
    return training_plan_error(problem, p);
  };
  training_plan const on_cp{.micro_batch = 8, .cp = 4}, on_ep{.micro_batch = 2, .ep = 4};
  CHECK(error(llama(long_llama(4)), on_cp).empty());
  CHECK(error(llama(long_llama(4)), on_ep).empty());
  CHECK(error(llama(long_llama(4)), {.tp = 2, .micro_batch = 8, .cp = 2}).empty());
  CHECK(error(llama(long_llama(4)), {.dp = 2, .micro_batch = 2, .ep = 2}).empty());
  CHECK(error(gpt(small(4, 3)), on_cp) ==
        "plan: cp = 4: learned positions are read by index, the sequence stays whole");
  CHECK(error(llama(long_llama(0)), on_ep) == "plan: the model has no experts to split (ep = 4)");
  llama_config odd = long_llama(4);
  odd.sequence = 6;
  CHECK(error(llama(odd), on_cp) == "plan: cp = 4 does not cut the sequence of 6 into 8 equal chunks");
  odd = long_llama(6);
  CHECK(error(llama(odd), on_ep) == "plan: ep = 4 does not divide the 6 experts");
  CHECK(error(llama(long_llama(4)), {.micro_batch = 8, .ep = 4}) ==
        "plan: micro-batch x micro-batches x dp x ep = 32, not the global batch of 8");
  CHECK(error(llama(long_llama(4)), {.micro_batch = 8, .cp = 2}) ==
        "plan: dp x cp x ep x tp x pp = 2, not the 4 ranks");

  // The search: every candidate valid, each once; cp and ep where they divide, never where they do not.
  training_problem problem{llama(long_llama(4)), 8, 4};
  std::vector<training_plan> const unasked = candidate_plans(problem);  // cp searched only where asked
  CHECK(std::all_of(unasked.begin(), unasked.end(), [](training_plan const& p) { return p.cp == 1; }));
  problem.max_context_parallel = 4;
  std::vector<training_plan> const plans = candidate_plans(problem);
  std::size_t with_cp = 0, with_ep = 0, with_both = 0;
  for (training_plan const& p : plans) {
    CHECK(training_plan_error(problem, p).empty());
    CHECK(std::count(plans.begin(), plans.end(), p) == 1);
    with_cp += p.cp > 1 ? 1U : 0U;
    with_ep += p.ep > 1 ? 1U : 0U;
    with_both += p.cp > 1 && p.ep > 1 ? 1U : 0U;
  }
  CHECK(with_cp > 0);
  CHECK(with_ep > 0);
  CHECK(with_both > 0);
  CHECK(std::none_of(plans.begin(), plans.end(), [](training_plan const& p) { return p.ep == 3 || p.cp == 3; }));
  std::vector<training_plan> const gpt_plans = candidate_plans({gpt(small(4, 3)), 8, 4});
  CHECK(std::none_of(gpt_plans.begin(), gpt_plans.end(), [](training_plan const& p) { return p.cp > 1 || p.ep > 1; }));
}

TEST_CASE("activations per rank fall as 1/cp, the experts' state as 1/ep; the ring and the experts' exchanges priced",
          "[parallel][planner]") {
  for (context_form form : {context_form::ring, context_form::all_to_all}) {
    llama_description const d(long_llama(0, form));
    memory_model const memory(d);
    INFO(to_string(form));
    // From cp = 2 to 4 exactly halved; cp = 1 keeps the probabilities [b, h, t, t] that cp does not (the
    // all-to-all form keeps its copies of queries, keys, values and output instead).
    state_memory const whole = memory.state({.micro_batch = 2}, 0, 2);
    state_memory const two = memory.state({.micro_batch = 2, .cp = 2}, 0, 2);
    state_memory const four = memory.state({.micro_batch = 2, .cp = 4}, 0, 2);
    CHECK(two.activations == 2 * four.activations);
    CHECK(whole.activations > two.activations);
    CHECK(two.parameters == whole.parameters);  // cp splits no parameter
    CHECK(four.parameters == whole.parameters);
    // The ring's blocks: cp - 1 exchanges forward, 2 cp - 1 backward, each rank's keys and values.
    std::vector<stage_description> const stages = d.stages(mesh_shape{{"dp", 1}, {"cp", 4}, {"tp", 1}}, 2);
    std::size_t calls = 0;
    for (exchange_spec const& e : stages[1].exchanges) calls += e.calls;
    CHECK(calls == (form == context_form::ring ? 3U + 7U : 0U));
    std::size_t moves = 0;
    for (transition_spec const& t : stages[1].transitions) moves += t.extents.size() == 4 ? 1U : 0U;
    CHECK(moves == (form == context_form::ring ? 0U : 8U));  // q, k, v, out and their gradients
  }
  llama_description const d(long_llama(4));
  memory_model const memory(d);
  state_memory const one = memory.state({.micro_batch = 8}, 0, 2),
                     four = memory.state({.micro_batch = 2, .ep = 4}, 0, 2);
  std::size_t expert_elements = 0, other = 0;
  for (parameter_spec const& p : llama_parameters(long_llama(4)))
    (p.name.find("experts_") != std::string::npos ? expert_elements : other) += p.elements();
  CHECK(one.parameters == (expert_elements + other) * sizeof(float));
  CHECK(four.parameters == (expert_elements / 4 + other) * sizeof(float));
  CHECK(four.optimizer_state == 2 * four.parameters);
  time_model const time(memory, machine(1e-5, 1e-9));
  CHECK(time.predict({.micro_batch = 2, .ep = 4}).tensor_parallel > 0);  // the tokens' all-to-alls
  CHECK(time.predict({.micro_batch = 8}).tensor_parallel == 0);
}

TEST_CASE("64 ranks and a 32-layer model: every plan enumerated, sized and timed", "[parallel][planner]") {
  gpt_config const c{
      .vocabulary = 50304, .sequence = 2048, .hidden = 4096, .heads = 32, .head_size = 128, .ffn = 16384, .layers = 32};
  training_problem const problem{gpt(c), 512, 64};
  gpt_description const description(c);
  memory_model const model(description);
  time_model const time(model, machine(1e-5, 1e-9));
  std::vector<training_plan> const plans = candidate_plans(problem);
  std::size_t largest = 0;
  double fastest = 1e300;
  for (training_plan const& p : plans) {
    for (std::size_t stage = 0; stage < p.pp; ++stage) {  // rank 0 of each stage: its embedding or head
      state_memory const m = model.state(p, stage * p.tp, 2);
      largest = std::max(largest, m.parameters + m.gradients + m.optimizer_state + m.activations);
    }
    fastest = std::min(fastest, time.predict(p).total());
  }
  INFO(plans.size() << " plans");
  CHECK(plans.size() > 1000);
  CHECK(largest > 0);
  CHECK(fastest > 0);
}

TEST_CASE("the memory model follows ZeRO's table, summed over the ranks", "[parallel][planner]") {
  gpt_config const c = small(4, 4);
  gpt_description const description(c);
  memory_model const model(description);
  std::size_t psi = 0;
  for (parameter_spec const& p : gpt_parameters(c)) psi += p.elements();
  // One stage, no tensor parallelism: replicas hold 16 Psi (ZeRO-0), or their shares.
  for (std::size_t dp : {1, 2, 3}) {
    for (unsigned z = 0; z < (dp > 1 ? 4U : 1U); ++z) {
      training_plan const p{.dp = dp, .zero = static_cast<zero_stage>(z), .micro_batch = 1};
      std::size_t parameters = 0, state = 0, gradients = 0;
      for (std::size_t r = 0; r < dp; ++r) {
        state_memory const m = model.state(p, r, 2);
        parameters += m.parameters;
        state += m.optimizer_state;
        gradients += m.gradients;
      }
      INFO("dp=" << dp << " ZeRO-" << z);
      CHECK(state == (z >= 1 ? 1 : dp) * 2 * 4 * psi);
      if (z < 3) CHECK(gradients == dp * 4 * psi);  // unreduced: every replica's whole gradient at the end of backward
      // ZeRO-3's buckets, one per model stage, start and free as backward goes: at most one stage's
      // unreduced gradient, or the reduced shards.
      if (z == 3) CHECK((gradients < dp * 4 * psi && gradients >= 4 * psi));
      if (z < 3) CHECK(parameters == dp * 4 * psi);
      if (z == 3) CHECK(parameters > 4 * psi);  // the shards plus two adjacent stages gathered on each rank
    }
  }
  // A pipeline splits the parameters among its stages: each counted once.
  for (std::size_t pp : {2, 4}) {
    training_plan const p{.pp = pp, .micro_batch = 1, .micro_batches = pp};
    std::size_t parameters = 0;
    for (std::size_t s = 0; s < pp; ++s) parameters += model.state(p, s, 2).parameters;
    CHECK(parameters == 4 * psi);
  }
}

TEST_CASE("a hardware model's fits and lookups", "[parallel][planner]") {
  // alpha + beta x bytes recovered from exact points, and from points 5% off either way.
  std::vector<double> const bytes{1e3, 1e4, 1e5, 1e6, 1e7};
  std::vector<double> exact, noisy;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    exact.push_back(2e-6 + 1e-10 * bytes[i]);
    noisy.push_back(exact.back() * (i % 2 == 0 ? 1.05 : 0.95));
  }
  link_cost const fit = fit_link_cost(bytes, exact);
  CHECK(std::abs(fit.alpha - 2e-6) < 1e-12);
  CHECK(std::abs(fit.beta - 1e-10) < 1e-16);
  link_cost const rough = fit_link_cost(bytes, noisy);
  for (std::size_t i = 0; i < bytes.size(); ++i) CHECK(std::abs(rough.time(bytes[i]) / exact[i] - 1) < 0.1);
  // Never negative: a falling series gives beta 0 and its weighted mean as alpha.
  link_cost const flat = fit_link_cost({1, 2}, {2e-6, 1e-6});
  CHECK(flat.beta == 0);
  CHECK(flat.alpha > 0);

  hardware_model h;
  h.gemm = {{64, 64, 64, 1e9}, {1024, 1024, 1024, 4e10}};
  CHECK(h.gemm_seconds({2, 60, 60, 60}) == Catch::Approx(2 * 2.0 * 60 * 60 * 60 / 1e9));
  CHECK(h.gemm_seconds({1, 4096, 1024, 512}) == Catch::Approx(2.0 * 4096 * 1024 * 512 / 4e10));
  // The nearest shape, not the nearest flop count: a tall, thin product runs at the small shapes' rate.
  CHECK(h.gemm_seconds({1, 1024, 64, 64}) == Catch::Approx(2.0 * 1024 * 64 * 64 / 1e9));
  CHECK(h.gemm_seconds({3, 0, 64, 64}) == 0);
  // Kernels: the measured fit per call, else the streamed bytes at the elementwise bandwidth.
  h.elementwise_bytes_per_second = 1e10;
  h.kernels = {{kernel_kind::gelu_forward, {1e-6, 1e-9}}};
  CHECK(h.kernel_seconds({kernel_kind::gelu_forward, 1000, 3}) == Catch::Approx(3 * (1e-6 + 1e-9 * 1000)));
  CHECK(h.kernel_seconds({kernel_kind::adamw, 1000}) == Catch::Approx(1000 * 7 * 4 / 1e10));
  CHECK(h.kernel_seconds({kernel_kind::add, 1000}, 8) == Catch::Approx(1000 * 3 * 8 / 1e10));
  h.collectives = {{collective_kind::all_reduce, 2, {1e-6, 1e-9}}, {collective_kind::all_reduce, 8, {4e-6, 2e-9}}};
  CHECK(h.collective_seconds(collective_kind::all_reduce, 1, 1e6) == 0);  // a group of one moves nothing
  CHECK(std::abs(h.collective_seconds(collective_kind::all_reduce, 2, 1e3) - 2e-6) < 1e-15);
  CHECK(h.collective_seconds(collective_kind::all_reduce, 7, 0) == 4e-6);  // the nearest group measured
  CHECK(h.collective_seconds(collective_kind::all_gather, 2, 1e3) == 0);   // none measured
  // Ranks share a node's cores: 2 cores, one node; then nodes of 8 devices, a rank each.
  h.cores = 2;
  CHECK(h.compute_sharing(1) == 1);
  CHECK(h.compute_sharing(2) == 1);
  CHECK(h.compute_sharing(8) == 4);
  h.cores = 8;
  h.ranks_per_node = 8;
  CHECK(h.compute_sharing(512) == 1);
  // Where each rank runs: one to a device across nodes of 8; on a node of 2 cores, 8 ranks in blocks of 4
  // (Open MPI's --map-by core), 3 ranks as 2 and 1, 2 ranks a core each.
  CHECK(h.core_of(0, 512) == 0);
  CHECK(h.core_of(13, 512) == 13);
  h.ranks_per_node = 0;
  h.cores = 2;
  for (std::size_t r = 0; r < 8; ++r) CHECK(h.core_of(r, 8) == r / 4);
  CHECK((std::array{h.core_of(0, 3), h.core_of(1, 3), h.core_of(2, 3)} == std::array<std::size_t, 3>{0, 0, 1}));
  CHECK((std::array{h.core_of(0, 2), h.core_of(1, 2)} == std::array<std::size_t, 2>{0, 1}));
  h.cores = 2, h.ranks_per_node = 4;  // nodes of 2 cores and 4 ranks: cores numbered node by node
  CHECK((std::array{h.core_of(4, 8), h.core_of(5, 8), h.core_of(6, 8)} == std::array<std::size_t, 3>{2, 2, 3}));
  // A cluster of nodes of 4 ranks: a group that cannot fit in a node is priced on the links between nodes.
  h.ranks_per_node = 4;
  h.collectives.push_back({collective_kind::all_reduce, 2, {1e-5, 1e-8}, true});
  CHECK(std::abs(h.collective_seconds(collective_kind::all_reduce, 2, 1e3, 1) - 2e-6) < 1e-15);  // neighbours
  CHECK(std::abs(h.collective_seconds(collective_kind::all_reduce, 2, 1e3, 2) - 2e-6) < 1e-15);  // 0 and 2: one node
  CHECK(std::abs(h.collective_seconds(collective_kind::all_reduce, 2, 1e3, 4) - 2e-5) < 1e-15);  // two nodes
  CHECK(std::abs(h.collective_seconds(collective_kind::all_reduce, 8, 0, 1) - 4e-6) < 1e-15);    // only within measured
  // A deferred collective (posted, then waited for) at its own fit where one was measured, else the blocking one's.
  hardware_model d;
  d.collectives = {{collective_kind::all_gather, 2, {1e-6, 0}},
                   {collective_kind::all_gather, 2, {5e-6, 0}, false, true},
                   {collective_kind::all_reduce, 2, {2e-6, 0}}};
  CHECK(d.collective_seconds(collective_kind::all_gather, 2, 0) == 1e-6);
  CHECK(d.collective_seconds(collective_kind::all_gather, 2, 0, 1, true) == 5e-6);
  CHECK(d.collective_seconds(collective_kind::all_reduce, 2, 0, 1, true) == 2e-6);
  // The library's own cost per stage, by the kind of the stage: 0 the embedding, 1 to L the blocks, then head, loss.
  gpt_config const four = small(4, 3);
  CHECK(decoder_stage_kind(four.layers, 0) == stage_kind::embedding);
  for (std::size_t s = 1; s <= 4; ++s) CHECK(decoder_stage_kind(four.layers, s) == stage_kind::block);
  CHECK(decoder_stage_kind(four.layers, 5) == stage_kind::head);
  CHECK(decoder_stage_kind(four.layers, 6) == stage_kind::loss);
  // Each communicating step of a redistribution priced by its own collective's fit.
  CHECK(collective_of(step_kind::all_gather) == collective_kind::all_gather);
  CHECK(collective_of(step_kind::all_reduce) == collective_kind::all_reduce);
  CHECK(collective_of(step_kind::reduce_scatter) == collective_kind::reduce_scatter);
  CHECK(collective_of(step_kind::all_to_all) == collective_kind::all_to_all);
  CHECK(collective_of(step_kind::all_to_all_v) == collective_kind::all_to_all);
  CHECK(collective_of(step_kind::permute) == collective_kind::point_to_point);
  h.overheads[static_cast<std::size_t>(stage_kind::head)] = {1e-5, 3e-5};
  CHECK(h.overhead(stage_kind::head).backward == 3e-5);
  CHECK(h.overhead(stage_kind::block).forward == 0);  // none measured: none charged
}

TEST_CASE("a stage's products: the textbook flops, split by tp and dp, the backward twice the forward",
          "[parallel][planner]") {
  for (std::size_t heads : {4, 3}) {
    gpt_config const c{
        .vocabulary = 96, .sequence = 8, .hidden = 16, .heads = heads, .head_size = 4, .ffn = 64, .layers = 2};
    double const T = 8, C = 16, HD = static_cast<double>(heads) * 4, F = 64, V = 96;
    // Per sequence, as the literature counts them: 2 flops per multiply-add.
    double const block = 2 * T * 4 * C * HD + 4 * T * T * HD + 4 * T * C * F, head = 2 * T * C * V;
    auto const flops = [&](std::size_t dp, std::size_t tp, std::size_t stage, std::size_t samples) {
      return forward_flops(gpt_description(c).stages(mesh_shape{{"dp", dp}, {"tp", tp}}, samples)[stage].work);
    };
    CHECK(flops(1, 1, 0, 1) == 0);
    CHECK(flops(1, 1, 1, 1) == Catch::Approx(block));
    CHECK(flops(1, 1, 3, 1) == Catch::Approx(head));
    CHECK(flops(1, 1, 4, 1) == 0);
    layer_costs const costs = partition_costs(gpt_description(c));
    REQUIRE(costs.blocks.size() == 2);
    CHECK(costs.blocks[1] == Catch::Approx(block));
    CHECK(costs.embedding == 0);
    CHECK(costs.head == Catch::Approx(head));
    for (std::size_t dp : {1, 2})
      for (std::size_t tp : {1, 2, 4})
        for (std::size_t stage : {1, 3}) {
          double const alone = flops(1, 1, stage, 3);
          double const here = flops(dp, tp, stage, 3 * dp);  // 3 samples per replica
          if (heads % tp == 0 || stage == 3)
            CHECK(here == Catch::Approx(alone / static_cast<double>(tp)));
          else  // rank 0 holds the most heads
            CHECK(here > alone / static_cast<double>(tp));
        }
    // Named: a range-for over a member of a temporary would read freed memory.
    auto const stages = gpt_description(c).stages(mesh_shape{{"tp", 2}}, 2);
    for (std::size_t stage = 0; stage < 5; ++stage)
      for (product_spec const& p : stages[stage].work.products)
        CHECK(input_gradient(p).flops() + operand_gradient(p).flops() == Catch::Approx(2 * p.flops()));
  }
}

TEST_CASE("the time model's parts: what each plan pays for", "[parallel][planner]") {
  gpt_config const c{
      .vocabulary = 512, .sequence = 64, .hidden = 128, .heads = 4, .head_size = 32, .ffn = 512, .layers = 4};
  gpt_description const description(c);
  memory_model const model(description);
  time_model const free_links(model, machine(0, 0)), slow_links(model, machine(1e-5, 1e-9));
  training_plan const one{.micro_batch = 8};
  step_time const t = free_links.predict(one);
  // One rank: no bubble, no collective, and the compute is the products' flops (the backward's twice the
  // forward's) at the rate plus the kernels' streamed bytes at the bandwidth.
  double flops = 0, bytes = 0;
  for (std::size_t s = 0; s < stages_of(description).size(); ++s) {
    stage_work const w = description.stages(mesh_shape{{"tp", 1}}, 8)[s].work;
    flops += 3 * forward_flops(w);
    for (auto const* part : {&w.forward, &w.input, &w.weight})
      for (kernel_spec const& k : *part)
        bytes += static_cast<double>(k.calls) * k.elements * 4 * streamed_elements(k.kind);
  }
  CHECK(t.bubble == Catch::Approx(0).margin(1e-12));
  CHECK(t.data_parallel == 0);
  CHECK(t.tensor_parallel == 0);
  CHECK(t.compute == Catch::Approx(flops / 1e10 + bytes / 1e10));
  CHECK(t.total() == Catch::Approx(t.compute + t.optimizer));
  // Data parallelism halves each rank's compute and adds the gradients' reduction, which ZeRO-2 makes a reduce-scatter.
  // Each replica computes its own share of the micro-batch: with free links, dp = 2 costs what one rank's half does.
  training_plan const dp2{.dp = 2, .micro_batch = 4};
  CHECK(free_links.predict(dp2).compute == Catch::Approx(free_links.predict({.micro_batch = 4}).compute));
  CHECK(free_links.predict(dp2).compute < t.compute);
  // Ranks sharing cores compute that many times slower: 2 ranks on 1 core take twice as long.
  hardware_model one_core = machine(0, 0);
  one_core.cores = 1;
  time_model const shared(model, one_core);
  CHECK(shared.predict(dp2).compute == Catch::Approx(2 * free_links.predict(dp2).compute));
  CHECK(shared.predict(dp2).optimizer == Catch::Approx(2 * free_links.predict(dp2).optimizer));
  // A pipeline's stages on one core: a stage waiting for the other yields it. With one micro-batch only one
  // stage computes at a time, and its forward and backward take what they take with a core each (the update,
  // both stages' at once, twice as long); with many, both compute at once in the steady state, and the step
  // takes at least the two stages' work on the one core.
  training_plan const chain{.pp = 2, .micro_batch = 8};
  step_time const chained = shared.predict(chain), apart = free_links.predict(chain);
  CHECK(chained.compute + chained.bubble == Catch::Approx(apart.compute + apart.bubble));
  CHECK(chained.optimizer == Catch::Approx(2 * apart.optimizer));
  training_plan const filled{.pp = 2, .micro_batch = 1, .micro_batches = 8};
  step_time const alone = free_links.predict(filled), sharing = shared.predict(filled);
  CHECK(sharing.total() > alone.total());
  CHECK(sharing.compute == Catch::Approx(2 * alone.compute).epsilon(0.2));  // the stages' work, nearly even
  CHECK(sharing.compute + sharing.bubble >= alone.compute + alone.bubble);
  // Where a stage's ranks share a core, the stage runs that much slower even alone: 4 ranks on 2 cores
  // bound in blocks put dp = 2 x pp = 2's stages a rank on each core (ranks 0, 2 and 1, 3), and tp = 2 x pp =
  // 2's a stage on each core (ranks 0, 1 and 2, 3). With one micro-batch one stage computes at a time: the
  // first as fast as with a core to each rank, the second twice as slow; with many, both run side by side
  // on their own cores, and the first's stages share both cores.
  hardware_model two_cores = machine(0, 0);
  two_cores.cores = 2;
  time_model const bound(model, two_cores);
  for (std::size_t m : {1, 8}) {
    training_plan const spread{.dp = 2, .pp = 2, .micro_batch = 8 / m, .micro_batches = m};
    training_plan const stacked{.tp = 2, .pp = 2, .micro_batch = 16 / m, .micro_batches = m};
    double const spread_alone = free_links.predict(spread).compute + free_links.predict(spread).bubble;
    double const stacked_alone = free_links.predict(stacked).compute + free_links.predict(stacked).bubble;
    double const spread_bound = bound.predict(spread).compute + bound.predict(spread).bubble;
    double const stacked_bound = bound.predict(stacked).compute + bound.predict(stacked).bubble;
    INFO("m=" << m);
    CHECK(stacked_bound == Catch::Approx(2 * stacked_alone));
    if (m == 1) CHECK(spread_bound == Catch::Approx(spread_alone));
    if (m == 8) CHECK(spread_bound > 1.5 * spread_alone);  // the stages nearly always compute at once
  }
  step_time const all_reduce = slow_links.predict(dp2);
  step_time const scatter = slow_links.predict({.dp = 2, .zero = zero_stage::gradients, .micro_batch = 4});
  CHECK(all_reduce.data_parallel > 0);
  CHECK(scatter.optimizer == Catch::Approx(all_reduce.optimizer / 2));
  // Tensor parallelism splits the products and pays Megatron's all-reduces inside each action.
  step_time const tp2 = slow_links.predict({.tp = 2, .micro_batch = 8});
  CHECK(tp2.tensor_parallel > 0);
  CHECK(tp2.compute < t.compute + tp2.tensor_parallel);
  // A pipeline of two stages waits: its bubble shrinks as micro-batches grow.
  step_time const m2 = free_links.predict({.pp = 2, .micro_batch = 4, .micro_batches = 2});
  step_time const m8 = free_links.predict({.pp = 2, .micro_batch = 1, .micro_batches = 8});
  CHECK(m2.bubble > 0);
  CHECK(m8.bubble / m8.total() < m2.bubble / m2.total());
  // ZeRO-3 gathers each stage's parameters before its forward and its backward.
  step_time const z3 = slow_links.predict({.dp = 2, .zero = zero_stage::parameters, .micro_batch = 4});
  CHECK(z3.parameter_gather > 0);
}

TEST_CASE("the time model charges the library's own costs: per stage and micro-batch, per stage gathered",
          "[parallel][planner]") {
  gpt_config const c{
      .vocabulary = 512, .sequence = 64, .hidden = 128, .heads = 4, .head_size = 32, .ffn = 512, .layers = 4};
  gpt_description const description(c);
  memory_model const model(description);
  hardware_model const plain = machine(0, 0);
  hardware_model costly = plain;
  // Distinct powers of two: each sum below is exact.
  costly.overheads[static_cast<std::size_t>(stage_kind::embedding)] = {0x1p-20, 0x1p-19};
  costly.overheads[static_cast<std::size_t>(stage_kind::block)] = {0x1p-16, 0x1p-15};
  costly.overheads[static_cast<std::size_t>(stage_kind::head)] = {0x1p-18, 0x1p-17};
  costly.overheads[static_cast<std::size_t>(stage_kind::loss)] = {0x1p-22, 0x1p-21};
  double const per_micro_batch =
      (0x1p-20 + 0x1p-19) + 4 * (0x1p-16 + 0x1p-15) + (0x1p-18 + 0x1p-17) + (0x1p-22 + 0x1p-21);
  time_model const without(model, plain), with(model, costly);
  // One rank: every stage's forward and backward, once per micro-batch.
  for (std::size_t m : {1, 4}) {
    training_plan const p{.micro_batch = 8 / m, .micro_batches = m};
    CHECK(with.predict(p).compute - without.predict(p).compute ==
          Catch::Approx(static_cast<double>(m) * per_micro_batch));
  }
  // ZeRO-3 on dp = 2: each model stage's parameters gathered by one all-gather before each forward and each
  // backward, and ZeRO-1's updated values by one all-gather per bucket (one here): fused collectives, not
  // redistributions, so a redistribution's overhead is not charged.
  costly.redistribution_overhead = 1e-5;
  time_model const gathering(model, costly);
  training_plan const z3{.dp = 2, .zero = zero_stage::parameters, .micro_batch = 2, .micro_batches = 4};
  training_plan const z1{.dp = 2, .zero = zero_stage::optimizer_state, .micro_batch = 2, .micro_batches = 4};
  CHECK(gathering.predict(z3).parameter_gather == Catch::Approx(with.predict(z3).parameter_gather));
  CHECK(gathering.predict(z1).data_parallel == Catch::Approx(with.predict(z1).data_parallel));
  std::size_t units = 0;
  for (stage_description const& s : stages_of(description)) units += s.parameters.empty() ? 0 : 1;
  CHECK(units == c.layers + 2);
  // Where ranks wait for ranks not running, every collective pays it: each stage's gather, and for ZeRO-1 the
  // gradients' one bucket and its gather back.
  costly.sync_overhead = 3e-5;
  time_model const waiting(model, costly);
  CHECK(waiting.predict(z3).parameter_gather - gathering.predict(z3).parameter_gather ==
        Catch::Approx(4 * 2 * static_cast<double>(units) * 3e-5));
  CHECK(waiting.predict(z1).data_parallel - gathering.predict(z1).data_parallel == Catch::Approx(2 * 3e-5));
  // ZeRO-3's gathers are deferred (started ahead, waited for): priced at the deferred all-gather where measured;
  // ZeRO-1's gathers back after the update are not.
  costly.collectives.push_back({collective_kind::all_gather, 2, {1e-4, 0}, false, true});
  time_model const deferring(model, costly);
  CHECK(deferring.predict(z3).parameter_gather - waiting.predict(z3).parameter_gather ==
        Catch::Approx(4 * 2 * static_cast<double>(units) * 1e-4));
  CHECK(deferring.predict(z1).data_parallel == Catch::Approx(waiting.predict(z1).data_parallel));
}

namespace {

// A model written only as a description: an input stage, blocks of the given widths (one [w, w] matrix
// each, replicated, keeping its [samples, w] input), and an output stage; no collectives.
class widths_model final : public model_description {
 public:
  explicit widths_model(std::vector<std::size_t> widths) : widths_(std::move(widths)) {}
  [[nodiscard]] std::size_t blocks() const override { return widths_.size(); }
  [[nodiscard]] std::vector<stage_description> stages(mesh_shape const&, std::size_t samples) const override {
    layout const matrix{replicated, replicated};
    std::vector<stage_description> out{{"in", stage_place::first, stage_kind::embedding, {}, {}, {}, {}, {}, {}}};
    for (std::size_t b = 0; b < widths_.size(); ++b) {
      std::size_t const w = widths_[b];
      stage_description s{"b" + std::to_string(b), stage_place::block, stage_kind::block, {}, {}, {}, {}, {}, {}};
      s.parameters = {{"b" + std::to_string(b) + ".w", {w, w}, matrix}};
      s.saved = {{"x", {samples, w}, matrix}};
      s.work.products = {{1, samples, w, w, true}};
      out.push_back(std::move(s));
    }
    out.push_back({"out", stage_place::last, stage_kind::head, {}, {}, {}, {}, {}, {}});
    return out;
  }
  [[nodiscard]] boundary_spec boundary(mesh_shape const&, std::size_t samples) const override {
    return {{samples, widths_.front()}, layout{replicated, replicated}};
  }
  [[nodiscard]] std::string tensor_parallel_error(std::size_t tp) const override {
    return tp > 1 ? "this model has no tensor parallelism" : "";
  }

 private:
  std::vector<std::size_t> widths_;
};

}  // namespace

TEST_CASE("blocks that differ are sized, placed and weighed each as it is", "[parallel][planner]") {
  // Widths 8, 2, 2, 2, 2: the partition weighs block flops (w^2 each), so two stages cut after the first block.
  widths_model const model({8, 2, 2, 2, 2});
  layer_costs const costs = partition_costs(model);
  REQUIRE(costs.blocks == std::vector<double>{128, 8, 8, 8, 8});
  std::vector<model_part> const parts = partition_layers(5, 2, costs);
  CHECK(parts[0].last == 1);
  memory_model const memory(model);
  training_plan const plan{.pp = 2, .micro_batch = 3, .micro_batches = 2, .schedule = schedule_kind::gpipe};
  CHECK(memory.held_stages(plan, 0) == std::vector<std::vector<std::size_t>>{{0, 1}});
  CHECK(memory.held_stages(plan, 1) == std::vector<std::vector<std::size_t>>{{2, 3, 4, 5, 6}});
  // Stage 0: one 8 x 8 matrix (parameters, gradients, Adam's two moments) and GPipe's two micro-batches of [3, 8].
  state_memory const first = memory.state(plan, 0, 2);
  CHECK(first.parameters == 64 * 4);
  CHECK(first.gradients == 64 * 4);
  CHECK(first.optimizer_state == 2 * 64 * 4);
  CHECK(first.activations == 2 * 3 * 8 * 4);
  // Stage 1: four 2 x 2 matrices, each keeping [3, 2] per micro-batch.
  state_memory const last = memory.state(plan, 1, 2);
  CHECK(last.parameters == 4 * 4 * 4);
  CHECK(last.activations == 2 * 4 * 3 * 2 * 4);
  // The model's own limit on tensor parallelism is the planner's.
  training_problem const problem{std::make_shared<widths_model const>(std::vector<std::size_t>{8, 2}), 4, 2};
  CHECK(training_plan_error(problem, {.tp = 2, .micro_batch = 4}) == "plan: this model has no tensor parallelism");
  for (training_plan const& p : candidate_plans(problem)) CHECK(p.tp == 1);
}
