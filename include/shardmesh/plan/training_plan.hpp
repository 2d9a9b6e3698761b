#pragma once
// An execution plan for training a model, and the space the planner searches:
// a mesh dp x cp x ep x pp x tp over the ranks (cp: context parallelism,
// each sequence split over cp ranks; ep: expert parallelism, the experts
// split over ep ranks, which split the batch too), a ZeRO stage, the micro-batch size
// per data-parallel replica, the micro-batches per step (accumulation, and
// the pipeline's micro-batches), the pipeline schedule and its chunks per
// stage, the precision the model computes in (strategy/precision.hpp) and
// its activation recomputation (strategy/recomputation.hpp). The global
// batch is their product (B_global = B_micro x N_acc x dp x ep), fixed by the
// problem; the precision and the recomputation are the problem's where it
// names them, else searched.
//
//   training_plan_error(problem, plan)   why a plan cannot run (empty: it can)
//   candidate_plans(problem)             every plan that can, each once
//
// A plan that cannot run: the ranks or the batch do not factor as it says;
// more tensor-parallel ranks than the model can split over (its
// description says why: a GPT's heads); more pipeline chunks than blocks
// (a chunk would hold none); a cp or an ep the model refuses (its
// description says why: a sequence cp does not cut evenly, learned
// positions, experts ep does not divide, or none); a schedule its
// generator refuses (pipeline_schedule.hpp says why). Plans that would only
// rename another are not candidates either: one stage has no schedule to
// choose (1F1B, v = 1, is forward and backward in turn), ZeRO stages shard
// over dp and are all stage 0 when dp = 1, and only interleaving has v > 1.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/strategy/pipeline_schedule.hpp"
#include "shardmesh/strategy/precision.hpp"
#include "shardmesh/strategy/recomputation.hpp"
#include "shardmesh/strategy/state_sharding.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardmesh::parallel {

struct training_plan {
  std::size_t dp = 1, tp = 1, pp = 1;
  zero_stage zero = zero_stage::none;
  std::size_t micro_batch = 1;    // samples per micro-batch on each data-parallel replica
  std::size_t micro_batches = 1;  // per step: accumulated, and what the pipeline schedules
  schedule_kind schedule = schedule_kind::one_f_one_b;
  std::size_t virtual_stages = 1;  // chunks per pipeline stage (v)
  precision compute = precision::fp32;
  recompute_mode recompute = recompute_mode::none;
  precision gradients = precision::fp32;  // what gradients are kept and reduced in: fp32, or bf16 in a bf16 model
  std::size_t cp = 1, ep = 1;             // context and expert parallelism

  [[nodiscard]] std::size_t ranks() const { return dp * cp * ep * tp * pp; }
  // The replicas a batch is split over: the data-parallel ones and the expert ranks.
  [[nodiscard]] std::size_t batch_replicas() const { return dp * ep; }
  [[nodiscard]] std::size_t global_batch() const { return micro_batch * micro_batches * batch_replicas(); }
  friend bool operator==(training_plan const&, training_plan const&) = default;
};

// "dp=2 tp=1 pp=2 zero=3 b=4 m=8 1f1b v=1 fp32 recompute=none" (and " cp=2 ep=4" where above 1)
[[nodiscard]] inline std::string to_string(training_plan const& p) {
  return "dp=" + std::to_string(p.dp) + (p.cp > 1 ? " cp=" + std::to_string(p.cp) : "") +
         (p.ep > 1 ? " ep=" + std::to_string(p.ep) : "") + " tp=" + std::to_string(p.tp) +
         " pp=" + std::to_string(p.pp) + " zero=" + std::to_string(static_cast<unsigned>(p.zero)) +
         " b=" + std::to_string(p.micro_batch) + " m=" + std::to_string(p.micro_batches) + " " +
         std::string(to_string(p.schedule)) + " v=" + std::to_string(p.virtual_stages) + " " +
         std::string(to_string(p.compute)) + " recompute=" + std::string(to_string(p.recompute)) +
         (p.gradients == precision::fp32 ? "" : " gradients=" + std::string(to_string(p.gradients)));
}

struct training_problem {
  std::shared_ptr<model_description const> model;
  std::size_t global_batch = 1;  // samples (sequences) per step
  std::size_t ranks = 1;
  std::size_t max_virtual_stages = 4;  // the largest v interleaving may use
  // The run's precision and recomputation; nullopt: searched.
  std::optional<precision> compute = precision::fp32;
  std::optional<recompute_mode> recompute = recompute_mode::none;
  std::optional<precision> gradients = precision::fp32;
  // The largest cp searched: 1 (the sequence whole) unless a long-sequence problem raises it; each value
  // multiplies the search (the other degrees factor the ranks left).
  std::size_t max_context_parallel = 1;
};

// Why plan cannot train problem's model; empty when it can.
[[nodiscard]] inline std::string training_plan_error(training_problem const& problem, training_plan const& plan) {
  auto const n = [](std::size_t x) { return std::to_string(x); };
  if (plan.dp == 0 || plan.tp == 0 || plan.pp == 0 || plan.cp == 0 || plan.ep == 0 || plan.micro_batch == 0 ||
      plan.micro_batches == 0 || plan.virtual_stages == 0)
    return "plan: every degree, the micro-batch and the micro-batch count must be at least 1";
  if (plan.ranks() != problem.ranks)
    return "plan: dp x cp x ep x tp x pp = " + n(plan.ranks()) + ", not the " + n(problem.ranks) + " ranks";
  if (plan.global_batch() != problem.global_batch)
    return "plan: micro-batch x micro-batches x dp x ep = " + n(plan.global_batch()) + ", not the global batch of " +
           n(problem.global_batch);
  if (std::string const e = problem.model->tensor_parallel_error(plan.tp); !e.empty()) return "plan: " + e;
  if (std::string const e = problem.model->context_parallel_error(plan.cp); !e.empty()) return "plan: " + e;
  if (plan.cp > problem.max_context_parallel)
    return "plan: cp = " + n(plan.cp) + " is above the problem's " + n(problem.max_context_parallel);
  if (std::string const e = problem.model->expert_parallel_error(plan.ep); !e.empty()) return "plan: " + e;
  if (plan.pp * plan.virtual_stages > problem.model->blocks())
    return "plan: " + n(plan.pp * plan.virtual_stages) + " pipeline chunks for " + n(problem.model->blocks()) +
           " blocks";
  if (plan.dp == 1 && plan.zero != zero_stage::none) return "plan: ZeRO stages shard over dp; with dp = 1 use stage 0";
  if (plan.pp == 1 && (plan.schedule != schedule_kind::one_f_one_b || plan.virtual_stages != 1))
    return "plan: one pipeline stage has no schedule to choose; use 1f1b with v = 1";
  if (plan.schedule == schedule_kind::interleaved && plan.virtual_stages < 2)
    return "plan: interleaving needs v >= 2 chunks per stage";
  if (plan.virtual_stages > problem.max_virtual_stages)
    return "plan: v = " + n(plan.virtual_stages) + " is above the problem's " + n(problem.max_virtual_stages);
  if (fixed_text const e = schedule_error(plan.schedule, plan.pp, plan.micro_batches, plan.virtual_stages); !e.empty())
    return std::string(e.view());
  if (problem.compute && plan.compute != *problem.compute)
    return "plan: the run computes in " + std::string(to_string(*problem.compute));
  if (problem.recompute && plan.recompute != *problem.recompute)
    return "plan: the run recomputes " + std::string(to_string(*problem.recompute));
  if (plan.gradients != precision::fp32 && (plan.gradients != precision::bf16 || plan.compute != precision::bf16))
    return "plan: gradients are kept and reduced in fp32, or in bf16 by a bf16 model";
  if (problem.gradients && plan.gradients != *problem.gradients)
    return "plan: the run keeps gradients in " + std::string(to_string(*problem.gradients));
  return {};
}

namespace detail {

// Every variant of `plan` (its ZeRO stage, schedule and chunks, precision,
// recomputation and gradient type) that can run, into out.
inline void add_plans(training_problem const& problem, training_plan plan, std::vector<training_plan>& out) {
  for (unsigned z = 0; z <= (plan.dp > 1 ? 3U : 0U); ++z) {
    plan.zero = static_cast<zero_stage>(z);
    auto const consider = [&](schedule_kind kind, std::size_t v) {
      plan.schedule = kind;
      plan.virtual_stages = v;
      for (precision p : precisions)
        for (recompute_mode r : recompute_modes)
          for (precision g : {precision::fp32, precision::bf16}) {
            plan.compute = p;
            plan.recompute = r;
            plan.gradients = g;
            if (training_plan_error(problem, plan).empty()) out.push_back(plan);
          }
    };
    if (plan.pp == 1) {
      consider(schedule_kind::one_f_one_b, 1);
      continue;
    }
    for (schedule_kind kind : {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::zero_bubble})
      consider(kind, 1);
    for (std::size_t v = 2; v <= problem.max_virtual_stages; ++v) consider(schedule_kind::interleaved, v);
  }
}

}  // namespace detail

// Every plan for which training_plan_error is empty, each once.
[[nodiscard]] inline std::vector<training_plan> candidate_plans(training_problem const& problem) {
  std::vector<training_plan> out;
  auto const divisors = [](std::size_t x) {
    std::vector<std::size_t> d;
    for (std::size_t i = 1; i <= x; ++i)
      if (x % i == 0) d.push_back(i);
    return d;
  };
  std::size_t const R = problem.ranks, B = problem.global_batch;
  model_description const& model = *problem.model;
  for (std::size_t dp : divisors(R))
    for (std::size_t cp : divisors(R / dp)) {
      if (cp > problem.max_context_parallel || !model.context_parallel_error(cp).empty()) continue;
      for (std::size_t ep : divisors(R / dp / cp)) {
        if (B % (dp * ep) != 0 || !model.expert_parallel_error(ep).empty()) continue;
        std::size_t const rest = R / dp / cp / ep;
        for (std::size_t tp : divisors(rest))
          for (std::size_t m : divisors(B / dp / ep))
            detail::add_plans(problem,
                              {.dp = dp,
                               .tp = tp,
                               .pp = rest / tp,
                               .micro_batch = B / dp / ep / m,
                               .micro_batches = m,
                               .cp = cp,
                               .ep = ep},
                              out);
      }
    }
  return out;
}

}  // namespace shardmesh::parallel
