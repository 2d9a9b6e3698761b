// Pipeline schedules as data: every generator over p = 1..8, m = 1..16,
// v = 1..3 either schedules (and passes the check, with the idle share of
// its closed form under unit costs) or refuses with its reason; the check
// catches what a hand-written schedule can get wrong, naming the stage and
// the action (compile_fail/ holds the same schedules as compile errors).
#include <shardmesh/strategy/pipeline_simulation.hpp>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <utility>

using namespace shardmesh;
using namespace shardmesh::parallel;
using namespace shardmesh::parallel::actions;

namespace {

constexpr schedule_kind kinds[] = {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::interleaved,
                                   schedule_kind::zero_bubble};

// The idle share's closed form under unit costs, as numerator / denominator.
struct fraction {
  std::size_t num, den;
};
constexpr fraction closed_form(schedule_kind k, std::size_t p, std::size_t m, std::size_t v) {
  if (k == schedule_kind::interleaved) return {p - 1, v * m + p - 1};
  if (k == schedule_kind::zero_bubble) {
    std::size_t const makespan = 2 * m + p - 1 + std::max(m, p);
    return {makespan - 3 * m, makespan};
  }
  return {p - 1, m + p - 1};
}

// The generator schedules exactly when it should, the check passes, and the idle share is the closed form.
constexpr bool holds(schedule_kind k, std::size_t p, std::size_t m, std::size_t v) {
  bool const refused = !schedule_error(k, p, m, v).empty();
  bool const should_refuse =
      (v > 1 && k != schedule_kind::interleaved) || (k == schedule_kind::interleaved && v > 1 && m % p != 0);
  if (refused || should_refuse) return refused == should_refuse;
  pipeline_simulation const s = simulate(make_schedule(k, p, m, v));
  fraction const f = closed_form(k, p, m, v);
  // idle / (p x makespan) == num / den, in integers (unit costs give integer times).
  return s.ok() &&
         s.idle_time() * static_cast<double>(f.den) == static_cast<double>(f.num) * static_cast<double>(p) * s.makespan;
}

// The same at compile time (the generators and the check are constant expressions), on the grid's smaller
// half: p = 1..4, m = 1..8 (the whole grid took a minute of compile time; the test case below runs it). One
// constant per p and generator, each evaluated within the compiler's limit.
template <std::size_t P, schedule_kind K>
constexpr bool grid_holds = [] {
  for (std::size_t m = 1; m <= 8; ++m)
    for (std::size_t v = 1; v <= 3; ++v)
      if (!holds(K, P, m, v)) return false;
  return true;
}();
template <std::size_t... P>
constexpr bool every_grid_holds(std::index_sequence<P...>) {
  return ((grid_holds<P + 1, schedule_kind::gpipe> && grid_holds<P + 1, schedule_kind::one_f_one_b> &&
           grid_holds<P + 1, schedule_kind::interleaved> && grid_holds<P + 1, schedule_kind::zero_bubble>) &&
          ...);
}
static_assert(every_grid_holds(std::make_index_sequence<4>{}), "a generator fails the check or its closed form");

std::string error_of(pipeline_schedule const& s) { return std::string(simulate(s).error.view()); }

// A valid hand-written 1F1B on 2 stages with 2 micro-batches, to break.
pipeline_schedule two_stages() {
  pipeline_schedule s("hand", 2, 2, 1, 2);
  s.actions[0] = {forward(0),          send_activation(0), forward(1),          send_activation(1),
                  receive_gradient(0), backward(0),        receive_gradient(1), backward(1)};
  s.actions[1] = {receive_activation(0), forward(0), backward(0), send_gradient(0),
                  receive_activation(1), forward(1), backward(1), send_gradient(1)};
  return s;
}

}  // namespace

TEST_CASE("every generator passes the check with its closed-form idle share", "[parallel][pipeline]") {
  for (std::size_t p = 1; p <= 8; ++p)
    for (schedule_kind k : kinds)
      for (std::size_t m = 1; m <= 16; ++m)
        for (std::size_t v = 1; v <= 3; ++v) {
          INFO(to_string(k) << " p=" << p << " m=" << m << " v=" << v);
          REQUIRE(holds(k, p, m, v));
        }
  STATIC_REQUIRE(check_schedule<[] { return interleaved_1f1b(4, 8, 2); }>());
}

TEST_CASE("generators keep their activation bounds, stage by stage", "[parallel][pipeline]") {
  for (std::size_t p = 1; p <= 8; ++p)
    for (std::size_t m = 1; m <= 16; ++m) {
      pipeline_simulation const gp = simulate(gpipe(p, m)), fb = simulate(one_f_one_b(p, m)),
                                zb = simulate(zero_bubble_h1(p, m));
      for (std::size_t s = 0; s < p; ++s) {
        CHECK(gp.peak_held[s] == m);
        CHECK(fb.peak_held[s] == std::min(p - s, m));  // 1F1B: p-s in flight, the first stage the most
        CHECK(zb.peak_held[s] <= std::min(2 * p - s - 1, m));
      }
    }
  // Interleaving trades memory for bubble: 2(p-1) + (v-1)p + 1 chunks on the first stage.
  CHECK(simulate(interleaved_1f1b(4, 8, 2)).peak_held[0] == 2 * 3 + 4 + 1);
}

TEST_CASE("refused schedules say why", "[parallel][pipeline]") {
  CHECK_THROWS_WITH(interleaved_1f1b(4, 6, 2),
                    "pipeline schedule: interleaved 1F1B runs micro-batches in rounds of p = 4 per chunk, and m = 6 "
                    "is not a multiple of it");
  CHECK_THROWS_WITH(make_schedule(schedule_kind::one_f_one_b, 2, 4, 2),
                    "pipeline schedule: 1f1b has one chunk per stage, not 2");
  CHECK_THROWS_WITH(gpipe(2, 0),
                    "pipeline schedule: stages, micro-batches and chunks must be at least 1, not 2, 0 and 1");
  CHECK_THROWS_AS(gpipe(0, 4), invalid_option_error);
}

TEST_CASE("the check names the stage and action of a broken schedule", "[parallel][pipeline]") {
  CHECK(simulate(two_stages()).ok());

  pipeline_schedule no_send = two_stages();
  no_send.actions[0].erase(no_send.actions[0].begin() + 3);
  CHECK(error_of(no_send) ==
        "pipeline schedule: stage 1, action 4 (receive activation of micro-batch 1, chunk 0): no stage sends it");

  pipeline_schedule early = two_stages();
  std::swap(early.actions[1][1], early.actions[1][2]);
  CHECK(error_of(early) ==
        "pipeline schedule: stage 1, action 1 (backward of micro-batch 0, chunk 0): comes before "
        "its forward");

  pipeline_schedule cycle = two_stages();  // stage 0 waits for a gradient before sending the activation it needs
  cycle.actions[0] = {forward(0), receive_gradient(0), backward(0),         send_activation(0),
                      forward(1), send_activation(1),  receive_gradient(1), backward(1)};
  CHECK(error_of(cycle) ==
        "pipeline schedule: stage 0, action 1 (receive gradient of micro-batch 0, chunk 0): waits "
        "forever for stage 1, itself waiting at action 0 (deadlock)");

  pipeline_schedule twice = two_stages();
  twice.actions[1].push_back(forward(1));
  CHECK(error_of(twice) == "pipeline schedule: stage 1, action 8 (forward of micro-batch 1, chunk 0): is done twice");

  pipeline_schedule lost = two_stages();
  lost.actions[0].pop_back();
  CHECK(error_of(lost) == "pipeline schedule: stage 0 has no backward of micro-batch 1, chunk 0");

  pipeline_schedule greedy = two_stages();
  greedy.held_bound = 1;
  CHECK(error_of(greedy) ==
        "pipeline schedule: stage 0, action 2 (forward of micro-batch 1, chunk 0): holds 2 "
        "micro-batch chunks, more than the schedule's bound of 1");
}

TEST_CASE("simulation with measured costs", "[parallel][pipeline]") {
  // GPipe on uniform stages: makespan (m + p - 1)(f + b), whatever f and b.
  action_costs costs{{{2.0, 3.0, 1.0}, {2.0, 3.0, 1.0}, {2.0, 3.0, 1.0}}, 0, {}};
  pipeline_simulation const g = simulate(gpipe(3, 5), costs);
  CHECK(g.makespan == (5 + 3 - 1) * (2.0 + 4.0));
  // A transfer time delays every hop of the fill and the drain.
  costs.transfer = 0.5;
  CHECK(simulate(gpipe(3, 5), costs).makespan == g.makespan + 2 * 2 * 0.5);
  // Zero bubble below 1F1B whenever m >= 2 and p >= 2, with any positive W.
  for (std::size_t m = 2; m <= 8; ++m)
    CHECK(simulate(zero_bubble_h1(2, m), action_costs{{{1, 1, 1}, {1, 1, 1}}, 0, {}}).idle_share() <
          simulate(one_f_one_b(2, m)).idle_share());
}

TEST_CASE("simulation of stages sharing cores", "[parallel][pipeline]") {
  // Over every generator and a grid, with uneven costs: with a core to each stage the shared simulation is
  // the plain one; with every stage on one core and instant transfers some stage always computes, so the
  // makespan is the whole work (twice it with two ranks a stage on that core); with the stages dealt over two
  // cores it is at least each core's work and the plain makespan, at most the plain makespan slowed by the
  // stages on a core.
  auto const placed = [](std::size_t p, std::size_t cores, std::size_t ranks) {
    std::vector<std::vector<std::size_t>> on(p);
    for (std::size_t stage = 0; stage < p; ++stage) on[stage].assign(ranks, stage % cores);
    return on;
  };
  for (schedule_kind k : kinds)
    for (std::size_t p = 2; p <= 5; ++p)
      for (std::size_t m = 1; m <= 8; ++m) {
        std::size_t const v = k == schedule_kind::interleaved && m % p == 0 ? 2 : 1;
        if (!schedule_error(k, p, m, v).empty()) continue;
        pipeline_schedule const s = make_schedule(k, p, m, v);
        action_costs costs;
        double work = 0;
        std::array<double, 2> on_core{0, 0};  // dealt over two cores
        for (std::size_t stage = 0; stage < p; ++stage) {
          costs.per_stage.push_back(
              {1.0 + 0.25 * static_cast<double>(stage), 1.5, 0.5 + 0.1 * static_cast<double>(stage)});
          double const stage_work = static_cast<double>(m * v) *
                                    (costs.per_stage[stage][0] + costs.per_stage[stage][1] + costs.per_stage[stage][2]);
          work += stage_work;
          on_core[stage % 2] += stage_work;
        }
        pipeline_simulation const plain = simulate(s, costs), own = simulate_shared(s, costs, placed(p, p, 1));
        INFO(to_string(k) << " p=" << p << " m=" << m << " v=" << v);
        REQUIRE(own.ok());
        CHECK(own.makespan == Catch::Approx(plain.makespan));
        for (std::size_t stage = 0; stage < p; ++stage) CHECK(own.busy[stage] == Catch::Approx(plain.busy[stage]));
        CHECK(own.peak_held == plain.peak_held);
        CHECK(simulate_shared(s, costs, placed(p, 1, 1)).makespan == Catch::Approx(work));
        CHECK(simulate_shared(s, costs, placed(p, 1, 2)).makespan == Catch::Approx(2 * work));
        double const dealt = simulate_shared(s, costs, placed(p, 2, 1)).makespan;
        CHECK(dealt >= std::max(on_core[0], on_core[1]) * (1 - 1e-9));
        CHECK(dealt >= plain.makespan * (1 - 1e-9));
        CHECK(dealt <= plain.makespan * static_cast<double>((p + 1) / 2) * (1 + 1e-9));
        // A stage's two ranks on two cores, every stage the same two: as if one rank a stage on one core.
        CHECK(simulate_shared(s, costs, std::vector<std::vector<std::size_t>>(p, {0, 1})).makespan ==
              Catch::Approx(work));
        costs.transfer = 0.3;  // a transfer delays, never speeds up
        CHECK(simulate_shared(s, costs, placed(p, 1, 1)).makespan >= work * (1 - 1e-9));
        // A part that sharing does not slow: with a core each the same makespan; on one core, the parts of
        // different stages overlap, so the makespan lies between the shared work and the whole.
        costs.transfer = 0;
        double apart = 0;
        for (std::size_t stage = 0; stage < p; ++stage) {
          costs.unshared.push_back({0.5, 0.25 * static_cast<double>(stage % 2), 0});
          apart += static_cast<double>(m * v) * (0.5 + 0.25 * static_cast<double>(stage % 2));
        }
        CHECK(simulate_shared(s, costs, placed(p, p, 1)).makespan == Catch::Approx(plain.makespan));
        double const mixed = simulate_shared(s, costs, placed(p, 1, 1)).makespan;
        CHECK(mixed >= (work - apart) * (1 - 1e-9));
        CHECK(mixed <= work * (1 + 1e-9));
      }
  // The cores of every stage, or an error.
  CHECK(simulate_shared(gpipe(3, 2), {}, placed(2, 1, 1)).error.view() ==
        "simulate_shared: the cores of 2 stages for 3");
}
