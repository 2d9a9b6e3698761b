#pragma once
// The check of any pipeline schedule, generated or written by hand, and
// its discrete-event simulation.
//
// simulate(schedule, costs) first checks, stage by stage in list order,
// that every chunk of every micro-batch is run forward once and backward
// once (B, or I then W), that each runs after what it needs (its input
// received, its forward, its gradient received, I before W) and each send
// after what it sends; that every receive has exactly one send on the peer
// stage and every send a receive. Then it runs the stages as an event
// simulation: a compute action takes its cost, a send takes no time (the
// executor's are non-blocking) and arrives `transfer` later, a receive
// waits for its send. A stage that can never go on is a deadlock; the
// message names it, its action and the stage it waits for. It counts the
// micro-batch chunks each stage holds activations for (forward done,
// backward not complete) against the schedule's held_bound, and returns
// the makespan, each stage's busy time, idle share and timeline.
//
// Idle share = sum over stages of (makespan - busy) / (p x makespan). With
// unit costs (F = B = 1 per chunk, and I = W = 1 with B split so a whole
// backward costs 2): GPipe and 1F1B give (p-1)/(m+p-1), interleaved 1F1B
// (p-1)/(vm+p-1), ZB-H1 (2m+p-1+max(m,p) - 3m)/(2m+p-1+max(m,p)), that is
// (p-1)/(3m+p-1) when m >= p (tests pin all four over a grid).
//
//   static_assert(check_schedule<[] { return one_f_one_b(4, 8); }>());
//
// simulate_shared(schedule, costs, cores) runs a valid schedule with its
// stages' ranks on the cores given, sharing those they share: the
// training planner's time model, where ranks share cores.
//
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/strategy/pipeline_schedule.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace shardmesh::parallel {

// The time of each compute action (any unit); `per_stage[s]` holds stage s's
// forward, input-gradient and weight-gradient times per chunk (a whole
// backward is their sum); empty: unit costs.
struct action_costs {
  std::vector<std::array<double, 3>> per_stage;
  double transfer = 0;  // from a send to its receive
  // Of per_stage, the part that stages sharing cores do not slow (their
  // collectives' waits), likewise by stage; empty: none.
  std::vector<std::array<double, 3>> unshared;

  [[nodiscard]] constexpr double of(std::size_t stage, pipeline_op op) const {
    return pick(per_stage.empty() ? std::array<double, 3>{1, 1, 1} : per_stage[stage], op);
  }
  [[nodiscard]] constexpr double unshared_of(std::size_t stage, pipeline_op op) const {
    return unshared.empty() ? 0 : pick(unshared[stage], op);
  }

 private:
  [[nodiscard]] static constexpr double pick(std::array<double, 3> const& c, pipeline_op op) {
    switch (op) {
      case pipeline_op::forward: return c[0];
      case pipeline_op::backward: return c[1] + c[2];
      case pipeline_op::backward_input: return c[1];
      case pipeline_op::backward_weight: return c[2];
      default: return 0;
    }
  }
};

struct timed_action {
  pipeline_action action;
  double start = 0, end = 0;
};

struct pipeline_simulation {
  fixed_text error;  // why the schedule is invalid; empty when it is valid
  double makespan = 0;
  std::vector<double> busy;                        // per stage
  std::vector<std::size_t> peak_held;              // per stage
  std::vector<std::vector<timed_action>> compute;  // per stage, its compute actions

  [[nodiscard]] constexpr bool ok() const { return error.empty(); }
  [[nodiscard]] constexpr double idle_time() const {
    double idle = 0;
    for (double b : busy) idle += makespan - b;
    return idle;
  }
  [[nodiscard]] constexpr double idle_share() const {
    return makespan > 0 ? idle_time() / (static_cast<double>(busy.size()) * makespan) : 0;
  }
};

namespace detail {

// What a stage has done for one micro-batch chunk, in its list order.
struct chunk_progress {
  bool input = false, forward = false, gradient = false, input_gradient = false, weight_gradient = false;
};

class schedule_walk {
 public:
  constexpr explicit schedule_walk(pipeline_schedule const& s) : s_(s) {}

  // Whether action k of `stage` is a receive or send, and its message's key
  // (kind, destination virtual stage, micro-batch) as one index.
  [[nodiscard]] constexpr std::size_t message(std::size_t stage, pipeline_action const& a) const {
    std::size_t const vs = s_.virtual_stage(stage, a.chunk);
    bool const gradient = a.op == pipeline_op::send_gradient || a.op == pipeline_op::receive_gradient;
    std::size_t const to = a.op == pipeline_op::send_activation ? vs + 1
                           : a.op == pipeline_op::send_gradient ? vs - 1
                                                                : vs;
    return ((gradient ? 1 : 0) * s_.virtual_stages() + to) * s_.micro_batches + a.micro;
  }
  [[nodiscard]] constexpr std::size_t messages() const { return 2 * s_.virtual_stages() * s_.micro_batches; }
  // The stage that sends what action a of `stage` receives.
  [[nodiscard]] constexpr std::size_t sender(std::size_t stage, pipeline_action const& a) const {
    std::size_t const p = s_.stages;
    return a.op == pipeline_op::receive_activation ? (stage + p - 1) % p : (stage + 1) % p;
  }

  // The first violation of the per-stage rules and the pairing of messages.
  [[nodiscard]] constexpr fixed_text error() const {
    if (s_.actions.size() != s_.stages) {
      fixed_text e;
      return e.append("pipeline schedule: ")
          .append(s_.actions.size())
          .append(" action lists for ")
          .append(s_.stages)
          .append(" stages");
    }
    std::vector<int> sends(messages(), 0), receives(messages(), 0);
    for (std::size_t stage = 0; stage < s_.stages; ++stage) {
      std::vector<chunk_progress> done(s_.micro_batches * s_.chunks);
      auto const& list = s_.actions[stage];
      for (std::size_t k = 0; k < list.size(); ++k) {
        pipeline_action const& a = list[k];
        if (a.micro >= s_.micro_batches || a.chunk >= s_.chunks)
          return at(stage, k, a, "names a micro-batch or chunk the schedule does not have");
        fixed_text const problem = step(stage, a, done[a.micro * s_.chunks + a.chunk]);
        if (!problem.empty()) return at(stage, k, a, problem.view());
        if (!is_compute(a.op)) {
          bool const send = a.op == pipeline_op::send_activation || a.op == pipeline_op::send_gradient;
          ++(send ? sends : receives)[message(stage, a)];
        }
      }
      for (std::size_t c = 0; c < done.size(); ++c) {
        pipeline_action const a = actions::forward(c / s_.chunks, c % s_.chunks);
        chunk_progress const& d = done[c];
        if (!d.forward) return missing(stage, a, "forward");
        if (!d.input_gradient) return missing(stage, a, "backward");
        if (!d.weight_gradient) return missing(stage, a, "weight gradient");
      }
    }
    for (std::size_t stage = 0; stage < s_.stages; ++stage)
      for (std::size_t k = 0; k < s_.actions[stage].size(); ++k) {
        pipeline_action const& a = s_.actions[stage][k];
        if (is_compute(a.op)) continue;
        std::size_t const key = message(stage, a);
        bool const send = a.op == pipeline_op::send_activation || a.op == pipeline_op::send_gradient;
        if (!send && sends[key] != 1) return at(stage, k, a, "no stage sends it");
        if (send && receives[key] != 1) return at(stage, k, a, "no stage receives it");
      }
    return {};
  }

  [[nodiscard]] constexpr fixed_text at(std::size_t stage, std::size_t k, pipeline_action const& a,
                                        std::string_view what) const {
    fixed_text e;
    return e.append("pipeline schedule: stage ")
        .append(stage)
        .append(", action ")
        .append(k)
        .append(" (")
        .append(describe(a).view())
        .append("): ")
        .append(what);
  }

 private:
  // One action against what its stage has done so far for that chunk.
  [[nodiscard]] constexpr fixed_text step(std::size_t stage, pipeline_action const& a, chunk_progress& d) const {
    std::size_t const vs = s_.virtual_stage(stage, a.chunk), last = s_.virtual_stages() - 1;
    fixed_text e;
    switch (a.op) {
      case pipeline_op::receive_activation:
        if (vs == 0) return e.append("the first chunk receives no activation");
        if (d.input) return e.append("is done twice");
        d.input = true;
        break;
      case pipeline_op::receive_gradient:
        if (vs == last) return e.append("the last chunk receives no gradient");
        if (d.gradient) return e.append("is done twice");
        d.gradient = true;
        break;
      case pipeline_op::forward:
        if (d.forward) return e.append("is done twice");
        if (vs > 0 && !d.input) return e.append("comes before its input is received");
        d.forward = true;
        break;
      case pipeline_op::backward:
      case pipeline_op::backward_input:
        if (d.input_gradient) return e.append("is done twice");
        if (!d.forward) return e.append("comes before its forward");
        if (vs < last && !d.gradient) return e.append("comes before its gradient is received");
        d.input_gradient = true;
        d.weight_gradient = a.op == pipeline_op::backward;
        break;
      case pipeline_op::backward_weight:
        if (d.weight_gradient) return e.append("is done twice");
        if (!d.input_gradient) return e.append("comes before its input gradient");
        d.weight_gradient = true;
        break;
      case pipeline_op::send_activation:
        if (vs == last) return e.append("the last chunk sends no activation");
        if (!d.forward) return e.append("comes before its forward");
        break;
      case pipeline_op::send_gradient:
        if (vs == 0) return e.append("the first chunk sends no gradient");
        if (!d.input_gradient) return e.append("comes before its input gradient");
        break;
    }
    return e;
  }

  [[nodiscard]] constexpr fixed_text missing(std::size_t stage, pipeline_action const& a, std::string_view what) const {
    fixed_text e;
    return e.append("pipeline schedule: stage ")
        .append(stage)
        .append(" has no ")
        .append(what)
        .append(" of micro-batch ")
        .append(a.micro)
        .append(", chunk ")
        .append(a.chunk);
  }

  pipeline_schedule const& s_;
};

// A simulation's result before its first event: p stages, nothing done.
[[nodiscard]] constexpr pipeline_simulation started(std::size_t p) {
  pipeline_simulation r;
  r.busy.assign(p, 0);
  r.peak_held.assign(p, 0);
  r.compute.assign(p, {});
  return r;
}

}  // namespace detail

// The event simulation alone, of a schedule that simulate() found valid:
// for one schedule timed under many costs (the training planner's search),
// whose check need not run again. Deadlocks and the held bound are still caught.
[[nodiscard]] constexpr pipeline_simulation simulate_checked(pipeline_schedule const& s,
                                                             action_costs const& costs = {}) {
  pipeline_simulation r = detail::started(s.stages);
  detail::schedule_walk const walk(s);
  std::size_t const p = s.stages;
  constexpr double unsent = -1;
  std::vector<double> arrival(walk.messages(), unsent), clock(p, 0);
  std::vector<std::size_t> next(p, 0), held(p, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (std::size_t stage = 0; stage < p; ++stage) {
      auto const& list = s.actions[stage];
      for (; next[stage] < list.size(); ++next[stage], moved = true) {
        pipeline_action const& a = list[next[stage]];
        if (is_compute(a.op)) {
          double const cost = costs.of(stage, a.op);
          r.compute[stage].push_back({a, clock[stage], clock[stage] + cost});
          clock[stage] += cost;
          r.busy[stage] += cost;
          if (a.op == pipeline_op::forward) {
            r.peak_held[stage] = std::max(r.peak_held[stage], ++held[stage]);
            if (held[stage] > s.held_bound) {
              fixed_text e;
              r.error = walk.at(stage, next[stage], a,
                                e.append("holds ")
                                    .append(held[stage])
                                    .append(" micro-batch chunks, more than the "
                                            "schedule's bound of ")
                                    .append(s.held_bound)
                                    .view());
              return r;
            }
          }
          if (a.op == pipeline_op::backward || a.op == pipeline_op::backward_weight) --held[stage];
        } else if (a.op == pipeline_op::send_activation || a.op == pipeline_op::send_gradient) {
          arrival[walk.message(stage, a)] = clock[stage] + costs.transfer;
        } else {
          double const t = arrival[walk.message(stage, a)];
          if (t == unsent) break;
          clock[stage] = std::max(clock[stage], t);
        }
      }
    }
  }
  for (std::size_t stage = 0; stage < p; ++stage) {
    if (next[stage] == s.actions[stage].size()) continue;
    pipeline_action const& a = s.actions[stage][next[stage]];
    std::size_t const peer = walk.sender(stage, a);
    fixed_text e;
    e.append("waits forever for stage ").append(peer);
    if (next[peer] < s.actions[peer].size())
      e.append(", itself waiting at action ").append(next[peer]).append(" (deadlock)");
    r.error = walk.at(stage, next[stage], a, e.view());
    return r;
  }
  r.makespan = *std::max_element(clock.begin(), clock.end());
  return r;
}

namespace detail {

// Each stage's rate while the stages with work left compute: 1 over the
// most computing ranks on any of its cores (load: ranks computing per core).
constexpr void share_cores(std::vector<std::vector<std::size_t>> const& cores, std::vector<double> const& left,
                           std::vector<std::size_t>& load, std::vector<double>& rate) {
  std::ranges::fill(load, std::size_t{0});
  for (std::size_t stage = 0; stage < cores.size(); ++stage)
    if (left[stage] > 0)
      for (std::size_t c : cores[stage]) ++load[c];
  for (std::size_t stage = 0; stage < cores.size(); ++stage) {
    std::size_t most = 1;
    for (std::size_t c : cores[stage]) most = std::max(most, load[c]);
    rate[stage] = 1 / static_cast<double>(most);
  }
}

}  // namespace detail

// The event simulation of a valid schedule whose stages' ranks run on
// cores they may share: cores[s] holds the core of each of stage s's
// ranks. A core computing for n ranks at once gives each 1/n of its time,
// and a stage, its ranks in step, runs at the pace of its slowest: its
// rate is 1 over the most computing ranks on any of its cores. An
// action's cost is its work at a rate of 1, its span stretched while it
// shares; its unshared part (costs.unshared) follows at its own time, the
// stage not computing. With every rank on a core of its own it is
// simulate_checked; with every stage's single rank on one core, instant
// transfers and nothing unshared, the makespan is the total work (some
// stage always computes). Busy times are spans.
[[nodiscard]] constexpr pipeline_simulation simulate_shared(pipeline_schedule const& s, action_costs const& costs,
                                                            std::vector<std::vector<std::size_t>> const& cores) {
  pipeline_simulation r = detail::started(s.stages);
  if (cores.size() != s.stages) {
    r.error.append("simulate_shared: the cores of ").append(cores.size()).append(" stages for ").append(s.stages);
    return r;
  }
  detail::schedule_walk const walk(s);
  std::size_t const p = s.stages;
  constexpr double unsent = -1, idle = -1;
  // Per stage in a compute action: its work left, then the time its
  // unshared part ends (its length while work is left).
  std::vector<double> arrival(walk.messages(), unsent), left(p, idle), apart(p, idle), began(p, 0);
  std::vector<double> rate(p, 0);
  std::vector<std::size_t> next(p, 0), held(p, 0), load;
  for (std::vector<std::size_t> const& on : cores)
    for (std::size_t c : on) load.resize(std::max(load.size(), c + 1));
  double now = 0;
  for (;;) {
    // Each stage on to its next compute action, or to a receive not yet
    // arrived, until none moves (a send may let an earlier stage on).
    double wake = -1;  // the earliest time a waiting stage goes on
    std::size_t computing = 0;
    auto const wake_at = [&](double t) { wake = wake < 0 || t < wake ? t : wake; };
    for (bool moved = true; moved;) {
      moved = false, wake = -1, computing = 0;
      for (std::size_t stage = 0; stage < p; ++stage) {
        auto const& list = s.actions[stage];
        for (; next[stage] < list.size() && left[stage] == idle; ++next[stage], moved = true) {
          pipeline_action const& a = list[next[stage]];
          if (is_compute(a.op)) {
            double const unshared = costs.unshared_of(stage, a.op);
            left[stage] = std::max(costs.of(stage, a.op) - unshared, 0.0), began[stage] = now;
            apart[stage] = left[stage] > 0 ? unshared : now + unshared;  // from when the work is done
            break;
          }
          double& t = arrival[walk.message(stage, a)];
          if (a.op == pipeline_op::send_activation || a.op == pipeline_op::send_gradient) {
            t = now + costs.transfer;
          } else if (t == unsent || t > now) {
            if (t != unsent) wake_at(t);
            break;
          }
        }
        if (left[stage] > 0) ++computing;
        if (left[stage] == 0) wake_at(apart[stage]);  // its unshared part, begun
      }
    }
    if (computing == 0 && wake < 0) break;  // done, or waiting forever
    detail::share_cores(cores, left, load, rate);
    double step = wake < 0 ? -1 : wake - now;
    for (std::size_t stage = 0; stage < p; ++stage)
      if (left[stage] > 0 && (step < 0 || left[stage] / rate[stage] < step)) step = left[stage] / rate[stage];
    now += step;
    for (std::size_t stage = 0; stage < p; ++stage) {
      if (left[stage] == idle) continue;
      pipeline_action const& a = s.actions[stage][next[stage]];
      if (left[stage] > 0) {
        left[stage] -= rate[stage] * step;
        if (left[stage] > 1e-12 * (1 + costs.of(stage, a.op))) continue;
        left[stage] = 0, apart[stage] += now;  // the work done: the unshared part from now
      }
      if (apart[stage] > now * (1 + 1e-12)) continue;
      r.compute[stage].push_back({a, began[stage], now});
      r.busy[stage] += now - began[stage];
      if (a.op == pipeline_op::forward) r.peak_held[stage] = std::max(r.peak_held[stage], ++held[stage]);
      if (a.op == pipeline_op::backward || a.op == pipeline_op::backward_weight) --held[stage];
      left[stage] = idle;
      ++next[stage];
    }
  }
  for (std::size_t stage = 0; stage < p; ++stage)
    if (next[stage] < s.actions[stage].size()) {
      fixed_text e;
      r.error = walk.at(stage, next[stage], s.actions[stage][next[stage]], e.append("waits forever (deadlock)").view());
      return r;
    }
  r.makespan = now;
  return r;
}

[[nodiscard]] constexpr pipeline_simulation simulate(pipeline_schedule const& s, action_costs const& costs = {}) {
  if (fixed_text const e = detail::schedule_walk(s).error(); !e.empty()) {
    pipeline_simulation r;
    r.error = e;
    return r;
  }
  return simulate_checked(s, costs);
}

// Compile time: a schedule (made by Make(), a constexpr callable) that is
// invalid fails to compile, showing the message as shardmesh_error's
// template argument.
template <auto Make>
constexpr bool check_schedule() {
  return require_valid<simulate(Make()).error>();
}

}  // namespace shardmesh::parallel
