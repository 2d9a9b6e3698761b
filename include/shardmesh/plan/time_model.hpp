#pragma once
// The planner's time model: a plan's step time on a machine, from the
// model's description (model_description.hpp), the algebra's plans of its
// redistributions (communication_model.hpp) and the machine's calibration
// (hardware_model.hpp). For each pipeline stage (the slowest rank of it,
// which holds the embedding or the head where it has them):
//
//   F, I, W  per micro-batch and chunk: the stage's products
//          (stage_work.hpp: F's declared, I's and W's derived) each at the
//          calibrated rate of its shape, its kernels at their calibrated
//          alpha + beta x elements, the library's own calibrated overhead
//          per stage, the tensor-parallel collectives at theirs per bytes,
//          and with ZeRO-3 the one all-gather of each of the chunk's
//          model stages before F and before I (each collective and gather
//          also paying a redistribution's overhead and, where ranks share
//          cores, the wait for ranks not running: sync_overhead)
//   bubble the schedule simulated with those costs and the activation's
//          point-to-point transfer (pipeline_simulation.hpp): its makespan
//          holds the computing, the tensor-parallel communication and the waiting
//   then   the gradient buckets' reduction on dp (all-reduce, or
//          reduce-scatter from ZeRO-2; with ZeRO-3 a bucket per model
//          stage), less the share the hardware hides behind the backward;
//          ZeRO-1 and 2's all-gather of each bucket's updated values; the
//          optimizer's elementwise pass over its state.
//
// Ranks that share a core (more ranks on a node than its cores, or
// devices) share its time, and a rank waiting for another stage yields it
// (MPI ranks told to yield when idle). The ranks are bound to cores as
// hardware_model::core_of places them, and the schedule is simulated with
// each core shared among the ranks computing on it (simulate_shared): a
// stage whose ranks share a core runs slower alone, stages on cores of
// their own run side by side; a step with every rank computing at once
// (no pipeline) pays the node's sharing in full. Collectives are not
// slowed by it (they wait more than they compute). The update, every
// rank's at once, is scaled by the sharing.
//
// Parts timed apart are added only where they do not overlap (the
// seed's rule): the reduction starts after the last backward of a
// pipeline's chunk, and the update after the reduction.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/errors.hpp"
#include "shardmesh/plan/communication_model.hpp"
#include "shardmesh/plan/data_parallel_collectives.hpp"
#include "shardmesh/plan/hardware_model.hpp"
#include "shardmesh/plan/memory_model.hpp"
#include "shardmesh/plan/training_plan.hpp"
#include "shardmesh/strategy/pipeline_schedule.hpp"
#include "shardmesh/strategy/pipeline_simulation.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace shardmesh::parallel {

// Seconds of one training step, by part.
struct step_time {
  double compute = 0;           // the busiest stage's forward and backward work, collectives inside them included
                                // (ranks sharing cores: slowed by the ranks computing beside them)
  double bubble = 0;            // the makespan beyond that: waiting on other stages and transfers
  double data_parallel = 0;     // the exposed gradient reduction, and ZeRO-1 and 2's parameter all-gather
  double optimizer = 0;         // the update
  double tensor_parallel = 0;   // of compute: the tensor-parallel collectives
  double parameter_gather = 0;  // of compute: ZeRO-3's all-gathers before each forward and backward
  [[nodiscard]] double total() const { return compute + bubble + data_parallel + optimizer; }
};

// Seconds of a stage's arithmetic for one micro-batch: its products, each
// at the calibrated rate of its shape, and its kernels at their fits; F,
// I (B's input half) and W (its weight half).
struct stage_seconds {
  double forward = 0, input = 0, weight = 0;
};
[[nodiscard]] inline stage_seconds stage_arithmetic(hardware_model const& hardware, stage_work const& work,
                                                    precision compute = precision::fp32) {
  std::size_t const element_bytes = bytes_of(compute).value;
  stage_seconds a;
  for (product_spec const& p : work.products) {
    a.forward += hardware.gemm_seconds(p, compute);
    a.input += hardware.gemm_seconds(input_gradient(p), compute);
    (p.weight ? a.weight : a.input) += hardware.gemm_seconds(operand_gradient(p), compute);
  }
  for (product_spec const& p : work.recomputed) a.input += hardware.gemm_seconds(p, compute);
  auto const kernels = [&](std::vector<kernel_spec> const& ks) {
    double seconds = 0;
    for (kernel_spec const& k : ks) seconds += hardware.kernel_seconds(k, element_bytes);
    return seconds;
  };
  a.forward += kernels(work.forward);
  a.input += kernels(work.input);
  a.weight += kernels(work.weight);
  return a;
}

// The model's flops per step of `global_batch` samples, as model flops
// utilisation counts them (PaLM's and Megatron-LM's convention): 3 times
// the forward flops of its products (the forward, then the input's and
// the weights' gradients, each as many), attention's scores and weighted
// values included; neither recomputation nor elementwise kernels count.
[[nodiscard]] inline double model_flops_per_step(model_description const& model, std::size_t global_batch) {
  double forward = 0;
  for (stage_description const& s : stages_on_one_rank(model)) forward += forward_flops(s.work);
  return 3 * forward * static_cast<double>(global_batch);
}

// Model flops utilisation of `plan` taking `seconds` a step: the model's
// flops per step over the peak rate, in the plan's precision, of the cores
// (devices) its ranks compute on, times the step.
[[nodiscard]] inline double model_flops_utilisation(double model_flops, training_plan const& plan,
                                                    hardware_model const& hardware, double seconds) {
  double const devices = static_cast<double>(plan.ranks()) / hardware.compute_sharing(plan.ranks());
  double const peak = hardware.peak_flops(plan.compute) * devices;
  return peak > 0 && seconds > 0 ? model_flops / (peak * seconds) : 0;
}

class time_model {
 public:
  time_model(memory_model const& model, hardware_model hardware) : model_(&model), hardware_(std::move(hardware)) {}

  // Precondition: training_plan_error is empty.
  [[nodiscard]] step_time predict(training_plan const& plan, std::size_t state_tensors = 2,
                                  std::size_t bucket_bytes = std::size_t{25} << 20) const {
    element_bytes const bytes = bytes_of(plan.compute, plan.gradients);
    double const sharing = hardware_.compute_sharing(plan.ranks());  // ranks sharing a core
    pipeline_costs const costs = pipeline_costs_of(plan, bytes);
    pipeline_simulation const sim = simulated(plan, costs.actions, sharing);
    after_backward slowest;
    for (std::size_t s = 0; s < plan.pp; ++s) {
      after_backward const d = data_parallel_work(plan, s, bytes, state_tensors, bucket_bytes, sharing);
      if (d.total() > slowest.total()) slowest = d;
    }
    step_time t;
    t.compute = *std::max_element(sim.busy.begin(), sim.busy.end());
    t.bubble = sim.makespan - t.compute;
    auto const m = static_cast<double>(plan.micro_batches * plan.virtual_stages);
    t.tensor_parallel = costs.tensor_parallel * m;
    t.parameter_gather = costs.parameter_gather * m;
    t.data_parallel = (1 - hardware_.data_parallel_overlap) * slowest.reduction + slowest.update_gather;
    t.optimizer = slowest.update;
    return t;
  }

  // The step's pipeline as predict() simulates it: each stage's actions with their predicted start and end.
  [[nodiscard]] pipeline_simulation timeline(training_plan const& plan) const {
    return simulated(plan, pipeline_costs_of(plan, bytes_of(plan.compute, plan.gradients)).actions,
                     hardware_.compute_sharing(plan.ranks()));
  }

  [[nodiscard]] hardware_model const& hardware() const { return hardware_; }

 private:
  // Seconds of one stage's F, I (B's input half) and W (its weight half):
  // the rank's products and kernels with a core to itself, and the
  // collectives on tp of F and of I.
  struct action_cost {
    double forward = 0, input = 0, weight = 0;
    double tp_forward = 0, tp_input = 0;
  };

  // What the pipeline simulation prices: each stage's F, I and W (whole, and
  // their collectives apart) and the transfer between stages; and per
  // micro-batch, the most any stage spends in tensor-parallel collectives
  // and in ZeRO-3's gathers.
  struct pipeline_costs {
    action_costs actions;
    double tensor_parallel = 0, parameter_gather = 0;
  };
  [[nodiscard]] pipeline_costs pipeline_costs_of(training_plan const& plan, element_bytes const& bytes) const {
    mesh_shape const stage_mesh = memory_model::stage_mesh(plan);
    std::size_t const samples = plan.micro_batch * plan.batch_replicas();  // a micro-batch over every replica
    std::vector<std::array<double, 3>> per_stage(plan.pp, {0, 0, 0}), collectives(plan.pp, {0, 0, 0});
    pipeline_costs out;
    for (std::size_t s = 0; s < plan.pp; ++s) {
      chunk_actions const a = actions_of_stage(plan, s, bytes);
      per_stage[s] = a.whole;
      collectives[s] = a.collectives;
      out.tensor_parallel = std::max(out.tensor_parallel, a.tensor_parallel);
      out.parameter_gather = std::max(out.parameter_gather, a.parameter_gather);
    }
    boundary_spec const boundary = model_->model().boundary(stage_mesh, samples);
    double const activation_bytes =
        static_cast<double>(local_elements(stage_mesh, boundary.placement, boundary.extents, 0) * bytes.value);
    out.actions = {
        per_stage,
        plan.pp > 1 ? hardware_.collective_seconds(collective_kind::point_to_point, 2, activation_bytes, plan.tp) : 0,
        collectives};
    return out;
  }

  [[nodiscard]] pipeline_simulation simulated(training_plan const& plan, action_costs const& costs,
                                              double sharing) const {
    return sharing > 1 ? simulate_shared(model_->schedule(plan), costs, stage_cores(plan))
                       : simulate_checked(model_->schedule(plan), costs);
  }

  // A pipeline stage's F, I and W for one micro-batch of one of its chunks
  // (the mean over its chunks): whole, and their collectives apart (ZeRO-3's
  // gathers split between F and I); and of all its chunks, the
  // tensor-parallel collectives' and the gathers' seconds.
  struct chunk_actions {
    std::array<double, 3> whole{0, 0, 0}, collectives{0, 0, 0};
    double tensor_parallel = 0, parameter_gather = 0;
  };
  [[nodiscard]] chunk_actions actions_of_stage(training_plan const& plan, std::size_t s,
                                               element_bytes const& bytes) const {
    mesh_shape const stage_mesh = memory_model::stage_mesh(plan);
    std::array<double, 3> work{0, 0, 0}, apart{0, 0, 0};  // arithmetic, collectives: over the chunks
    chunk_actions out;
    for (std::vector<std::size_t> const& chunk : model_->held_stages(plan, s))
      for (std::size_t st : chunk) {
        action_cost const a = cached_stage_cost(plan, stage_mesh, st);
        double const gather = parameter_gather(plan, st, bytes.value);  // before F and before I
        work[0] += a.forward, work[1] += a.input, work[2] += a.weight;
        apart[0] += a.tp_forward + gather / 2, apart[1] += a.tp_input + gather / 2;
        out.tensor_parallel += a.tp_forward + a.tp_input;
        out.parameter_gather += gather;
      }
    for (std::size_t k = 0; k < 3; ++k) {
      out.collectives[k] = apart[k] / static_cast<double>(plan.virtual_stages);
      out.whole[k] = work[k] / static_cast<double>(plan.virtual_stages) + out.collectives[k];
    }
    return out;
  }

  // What a stage does after its backward, on its rank 0 (its tp rank 0
  // holds the largest shards): the gradient buckets' reduction on dp,
  // ZeRO-1 and 2's gather of each bucket's updated values, and the update.
  struct after_backward {
    double reduction = 0, update_gather = 0, update = 0;
    [[nodiscard]] double total() const { return reduction + update_gather + update; }
  };
  [[nodiscard]] after_backward data_parallel_work(training_plan const& plan, std::size_t s, element_bytes const& bytes,
                                                  std::size_t state_tensors, std::size_t bucket_bytes,
                                                  double sharing) const {
    state_memory const m = model_->state(plan, s * plan.tp, state_tensors);
    double const gradient_bytes = static_cast<double>(m.gradients);
    double const buckets = plan.zero == zero_stage::parameters
                               ? static_cast<double>(stages_with_parameters(plan, s))
                               : std::max(1.0, std::ceil(gradient_bytes / static_cast<double>(bucket_bytes)));
    auto const per_bucket = [&](collective_kind kind, bool deferred, double total) {
      return buckets * (hardware_.collective_seconds(kind, plan.dp, total / buckets, dp_stride(plan), deferred) +
                        hardware_.sync_overhead);
    };
    after_backward out;
    if (plan.dp > 1)
      for (dp_collective const& c : data_parallel_collectives(plan.zero)) {
        if (c.what == dp_payload::gradients) out.reduction = per_bucket(c.kind, true, gradient_bytes);
        if (c.what == dp_payload::updated_parameters)  // the values, not gradients
          out.update_gather = per_bucket(
              c.kind, false, gradient_bytes * static_cast<double>(bytes.value) / static_cast<double>(bytes.gradient));
      }
    std::size_t const tensors = std::max<std::size_t>(state_tensors, 1) + (bytes.master ? 1 : 0);
    double const elements = static_cast<double>(m.optimizer_state) / static_cast<double>(tensors * bytes.state);
    out.update = sharing * hardware_.kernel_seconds({kernel_kind::adamw, elements}, bytes.state);
    return out;
  }

  // The core of each of each stage's ranks (numbered row-major over dp x cp x ep x pp x tp).
  [[nodiscard]] std::vector<std::vector<std::size_t>> stage_cores(training_plan const& plan) const {
    std::size_t const ranks = plan.ranks();
    std::vector<std::vector<std::size_t>> cores(plan.pp);
    for (std::size_t d = 0; d < plan.dp * plan.cp * plan.ep; ++d)
      for (std::size_t s = 0; s < plan.pp; ++s)
        for (std::size_t t = 0; t < plan.tp; ++t)
          cores[s].push_back(hardware_.core_of((d * plan.pp + s) * plan.tp + t, ranks));
    return cores;
  }

  // stage_cost, made once per what it depends on: a search asks for the
  // same stage on the same stage mesh for every pipeline depth, schedule,
  // micro-batch count and ZeRO stage. Not safe to share between threads.
  [[nodiscard]] action_cost const& cached_stage_cost(training_plan const& plan, mesh_shape const& mesh,
                                                     std::size_t st) const {
    auto const key = std::tuple(plan.dp, plan.cp, plan.ep, plan.tp, plan.micro_batch, st, plan.compute, plan.recompute);
    auto it = stage_costs_.find(key);
    if (it == stage_costs_.end())
      it = stage_costs_.emplace(key, stage_cost(plan, mesh, model_->stages(plan)[st])).first;
    return it->second;
  }

  // One model stage's actions for one micro-batch on the stage's rank 0:
  // its arithmetic, the library's overhead (in I, where B's bookkeeping
  // runs) and its collectives, each with a redistribution's overhead, and
  // its exchanges (the ring's blocks, priced as not hidden behind the
  // blocks' kernels: on the host they are not; the experts' tokens).
  [[nodiscard]] action_cost stage_cost(training_plan const& plan, mesh_shape const& mesh,
                                       stage_description const& stage) const {
    stage_seconds const arithmetic = stage_arithmetic(hardware_, stage.work, plan.compute);
    element_bytes const bytes = bytes_of(plan.compute, plan.gradients);
    stage_overhead const overhead = hardware_.overhead(stage.kind);
    action_cost a;
    a.forward = arithmetic.forward + overhead.forward;
    a.input = arithmetic.input + overhead.backward;
    a.weight = arithmetic.weight;
    auto const collectives = [&](bool in_backward) {
      double seconds = 0;
      for (auto const& [kind, traffic] :
           transition_traffic(mesh, stage.transitions, in_backward, 0, bytes.value, bytes.statistic))
        seconds += static_cast<double>(traffic.calls) *
                   (hardware_.collective_seconds(
                        collective_of(kind), traffic.group,
                        static_cast<double>(traffic.bytes_held) / static_cast<double>(traffic.calls),
                        traffic.group == plan.tp ? 1 : dp_stride(plan)) +  // on tp, else the loss's sum on dp
                    hardware_.redistribution_overhead +
                    hardware_.sync_overhead);
      return seconds;
    };
    auto const exchanges = [&](bool in_backward) {
      double seconds = 0;
      for (exchange_spec const& e : stage.exchanges) {
        if (e.in_backward != in_backward || e.calls == 0) continue;
        double const calls = static_cast<double>(e.calls);
        double const moved =
            e.elements * static_cast<double>(bytes.value) + e.statistic_elements * static_cast<double>(bytes.statistic);
        seconds += calls * (hardware_.collective_seconds(collective_of(e.kind), mesh.extent(mesh.find(e.axis)),
                                                         moved / calls, axis_stride(plan, e.axis)) +
                            hardware_.sync_overhead);
      }
      return seconds;
    };
    a.tp_forward = collectives(false) + exchanges(false);
    a.tp_input = collectives(true) + exchanges(true);
    return a;
  }

  // ZeRO-3's all-gathers of stage st's parameters, before its F and before its I: seconds of both.
  [[nodiscard]] double parameter_gather(training_plan const& plan, std::size_t st, std::size_t element_bytes) const {
    double ahead = 0;
    for (dp_collective const& c : data_parallel_collectives(plan.zero)) ahead += c.per_micro_batch() ? 1 : 0;
    return ahead == 0 ? 0 : ahead * gathers(plan, st, element_bytes, true);  // started ahead, waited for before use
  }

  // One all-gather on dp of stage st's parameters (their tp shards), all
  // at once (train/detail/fused_gather.hpp); deferred: posted, then waited
  // for. Made once per what it depends on (a search asks for each stage of
  // every plan).
  [[nodiscard]] double gathers(training_plan const& plan, std::size_t st, std::size_t element_bytes,
                               bool deferred) const {
    auto const& parameters = model_->stages(plan)[st].parameters;
    if (plan.dp <= 1 || parameters.empty()) return 0;
    auto const key = std::tuple(plan.dp, plan.cp, plan.ep, plan.tp, plan.pp, st, element_bytes, deferred);
    if (auto const it = gathers_.find(key); it != gathers_.end()) return it->second;
    std::size_t elements = 0;
    for (parameter_spec const& p : parameters)
      elements += local_elements(memory_model::stage_mesh(plan), p.placement, p.extents, 0);
    double const seconds =
        hardware_.collective_seconds(collective_kind::all_gather, plan.dp,
                                     static_cast<double>(elements * element_bytes), dp_stride(plan), deferred) +
        hardware_.sync_overhead;
    return gathers_.emplace(key, seconds).first->second;
  }

  // The model stages pipeline stage s holds that have parameters (ZeRO-3's buckets).
  [[nodiscard]] std::size_t stages_with_parameters(training_plan const& plan, std::size_t s) const {
    std::size_t n = 0;
    for (std::vector<std::size_t> const& chunk : model_->held_stages(plan, s))
      for (std::size_t st : chunk) n += model_->stages(plan)[st].parameters.empty() ? 0U : 1U;
    return n;
  }

  // Ranks are numbered row-major over dp x cp x ep x pp x tp: a dp group's ranks are cp x ep x pp x tp apart.
  [[nodiscard]] static std::size_t dp_stride(training_plan const& plan) {
    return plan.cp * plan.ep * plan.pp * plan.tp;
  }
  // ... a cp group's ep x pp x tp, an ep group's pp x tp.
  [[nodiscard]] static std::size_t axis_stride(training_plan const& plan, std::string_view axis) {
    return axis == "cp" ? plan.ep * plan.pp * plan.tp : plan.pp * plan.tp;
  }

  memory_model const* model_;
  hardware_model hardware_;
  mutable std::map<std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, precision,
                              recompute_mode>,
                   action_cost>
      stage_costs_;
  mutable std::map<
      std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, bool>,
      double>
      gathers_;
};

}  // namespace shardmesh::parallel
