#pragma once
// The planner's memory model, for one rank of a plan: the bytes of
// parameters, gradients, optimizer state and activations the trainer's
// memory ledger records on it, from the model's declared parameters and
// saved tensors (model_spec.hpp)
// placed by the same layouts the model and the trainer use
// (transformer_layouts, state_layouts_for) on the rank's stage mesh (dp x
// tp), with the pipeline chunks partition_layers gives its stage: uneven
// shards, and the first and last stages' embedding and head, included.
//
// Per category, the most held at once during a step:
//   parameters       the stored values, and with ZeRO-3 the values of two
//                    adjacent model stages gathered at once (the trainer
//                    gathers a stage's parameters just before it runs and
//                    prefetches the next)
//   gradients        the unreduced gradients of every parameter the rank
//                    holds: they are all alive at the end of the last
//                    backward when micro-batches accumulate or a pipeline
//                    holds buckets until a chunk's backward is done. (One
//                    stage without accumulation starts buckets during the
//                    backward: then this is the bound, reached with one bucket.)
//   optimizer state  each state tensor (Adam's two, SGD's momentum) in the state layout
//   activations      what the layers keep from a forward to its backward
//                    (gpt_stage_saved), for every (micro-batch, chunk) the
//                    stage holds at once: the schedule's actions on this
//                    stage, in order, add a chunk's bytes at its forward
//                    and remove them at its backward (B, when split).
//                    With a zero-bubble schedule, what the deferred weight
//                    gradients hold from B to W is workspace.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/plan/model_spec.hpp"
#include "shardmesh/plan/training_plan.hpp"
#include "shardmesh/strategy/layer_partition.hpp"
#include "shardmesh/strategy/pipeline_schedule.hpp"
#include "shardmesh/strategy/state_sharding.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

namespace shardmesh::parallel {

struct state_memory {
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0;  // bytes, the most held at once
};

// The model's declared stages, the partitions of its blocks into pipeline
// chunks, the schedules and the bytes a micro-batch keeps (each made once: a
// search asks for thousands of plans).
class gpt_memory_model {
 public:
  explicit gpt_memory_model(gpt_config const& c) : config_(c), specs_(gpt_stage_specs(c)), costs_(gpt_layer_costs(c)) {}

  // The model stages (gpt numbering) each pipeline chunk of stage `stage` holds, chunk by chunk.
  [[nodiscard]] std::vector<std::vector<std::size_t>> held_stages(training_plan const& plan, std::size_t stage) const {
    std::vector<model_part> const& parts = partition(plan.pp * plan.virtual_stages);
    std::vector<std::vector<std::size_t>> out;
    for (std::size_t chunk = 0; chunk < plan.virtual_stages; ++chunk) {
      model_part const& part = parts[chunk * plan.pp + stage];
      std::vector<std::size_t> stages;
      if (part.embedding) stages.push_back(0);
      for (std::size_t l = part.first; l < part.last; ++l) stages.push_back(l + 1);
      if (part.head) stages.insert(stages.end(), {config_.layers + 1, config_.layers + 2});  // the head and the loss
      out.push_back(std::move(stages));
    }
    return out;
  }

  // Rank `rank` of the plan's mesh dp x pp x tp (row-major, as device_mesh
  // numbers ranks), for elements of `element_bytes` and an optimizer keeping
  // `state_tensors` tensors per parameter. Precondition: training_plan_error is empty.
  [[nodiscard]] state_memory state(training_plan const& plan, std::size_t rank, std::size_t element_bytes,
                                   std::size_t state_tensors) const {
    std::size_t const tp_coordinate = rank % plan.tp, stage = rank / plan.tp % plan.pp;
    std::size_t const dp_coordinate = rank / plan.tp / plan.pp;
    mesh_shape const stage_mesh{{"dp", plan.dp}, {"tp", plan.tp}};
    std::size_t const stage_rank = dp_coordinate * plan.tp + tp_coordinate;
    transformer_layouts const layouts(stage_mesh, config_.sequence_parallel);
    state_memory out = parameter_state(plan, stage, stage_mesh, stage_rank, layouts, element_bytes, state_tensors);
    out.activations = activations(plan, stage, stage_mesh, stage_rank, layouts, element_bytes);
    return out;
  }

  [[nodiscard]] gpt_config const& config() const { return config_; }
  [[nodiscard]] std::vector<stage_spec> const& stages() const { return specs_; }

 private:
  [[nodiscard]] state_memory parameter_state(training_plan const& plan, std::size_t stage, mesh_shape const& stage_mesh,
                                             std::size_t stage_rank, transformer_layouts const& layouts,
                                             std::size_t element_bytes, std::size_t state_tensors) const {
    struct elements {
      std::size_t compute = 0, stored = 0, reduced = 0, state = 0;
    };
    auto const of_stage = [&](std::size_t s) {
      elements e;
      for (parameter_spec const& p : specs_[s].parameters) {
        tensor_index global{};
        std::copy(p.extents.begin(), p.extents.end(), global.begin());
        state_layouts const l = state_layouts_for(bind(stage_mesh, layouts.*p.placement), plan.zero, 0);
        e.compute += local_size(stage_mesh, l.compute, global, stage_rank);
        e.stored += local_size(stage_mesh, l.stored, global, stage_rank);
        e.reduced += local_size(stage_mesh, l.reduced, global, stage_rank);
        e.state += local_size(stage_mesh, l.state, global, stage_rank);
      }
      return e;
    };
    // Every block is the same layer (gpt_stage_specs): sized once.
    std::optional<elements> block;
    auto const of = [&](std::size_t s) {
      if (s < 1 || s > config_.layers) return of_stage(s);
      if (!block) block = of_stage(s);
      return *block;
    };
    elements total;
    std::size_t gathered = 0;  // ZeRO-3: the most compute-layout elements of two adjacent stages
    for (std::vector<std::size_t> const& chunk : held_stages(plan, stage)) {
      std::size_t previous = 0;
      for (std::size_t s : chunk) {
        elements const e = of(s);
        total.compute += e.compute;
        total.stored += e.stored;
        total.reduced += e.reduced;
        total.state += e.state;
        gathered = std::max(gathered, previous + e.compute);
        previous = e.compute;
      }
    }
    bool const zero3 = plan.zero == zero_stage::parameters;
    return {(total.stored + (zero3 ? gathered : 0)) * element_bytes,
            std::max(total.compute, total.reduced) * element_bytes, state_tensors * total.state * element_bytes};
  }

  [[nodiscard]] std::size_t activations(training_plan const& plan, std::size_t stage, mesh_shape const& stage_mesh,
                                        std::size_t stage_rank, transformer_layouts const& layouts,
                                        std::size_t element_bytes) const {
    kept_bytes const& kept = kept_per_micro_batch(plan, stage_mesh, stage_rank, layouts, element_bytes);
    std::vector<model_part> const& parts = partition(plan.pp * plan.virtual_stages);
    std::vector<std::size_t> chunk_bytes;
    for (std::size_t chunk = 0; chunk < plan.virtual_stages; ++chunk) {
      model_part const& part = parts[chunk * plan.pp + stage];
      chunk_bytes.push_back((part.embedding ? kept.embedding : 0) + (part.last - part.first) * kept.block +
                            (part.head ? kept.head : 0));
    }
    std::size_t held = 0, most = 0;
    for (pipeline_action const& a : schedule(plan).actions[stage]) {
      if (a.op == pipeline_op::forward) most = std::max(most, held += chunk_bytes[a.chunk]);
      if (a.op == pipeline_op::backward || a.op == pipeline_op::backward_input) held -= chunk_bytes[a.chunk];
    }
    return most;
  }

  // Bytes one micro-batch keeps on a rank of the stage mesh (gpt_stage_saved): the embedding's, a block's,
  // and the head's with the loss's.
  struct kept_bytes {
    std::size_t embedding = 0, block = 0, head = 0;
  };
  kept_bytes const& kept_per_micro_batch(training_plan const& plan, mesh_shape const& stage_mesh,
                                         std::size_t stage_rank, transformer_layouts const& layouts,
                                         std::size_t element_bytes) const {
    std::size_t const samples = plan.micro_batch * plan.dp;
    auto const key = std::tuple(plan.dp, plan.tp, samples, stage_rank, element_bytes);
    if (auto it = kept_.find(key); it != kept_.end()) return it->second;
    auto const of_stage = [&](std::size_t s) {
      std::size_t elements = 0;
      for (saved_spec const& t : gpt_stage_saved(config_, s, samples)) {
        tensor_index global{};
        std::copy(t.extents.begin(), t.extents.end(), global.begin());
        tensor_index const local =
            local_extents(stage_mesh, bind(stage_mesh, layouts.*t.placement), global, stage_rank);
        std::size_t n = 1;
        for (std::size_t d = 0; d + (t.per_row ? 1 : 0) < t.extents.size(); ++d) n *= local[d];
        elements += n;
      }
      return elements * element_bytes;
    };
    std::size_t const L = config_.layers;
    kept_bytes const bytes{of_stage(0), L > 0 ? of_stage(1) : 0, of_stage(L + 1) + of_stage(L + 2)};
    return kept_.emplace(key, bytes).first->second;
  }

  std::vector<model_part> const& partition(std::size_t chunks) const {
    auto it = partitions_.find(chunks);
    if (it == partitions_.end())
      it = partitions_.emplace(chunks, partition_layers(config_.layers, chunks, costs_)).first;
    return it->second;
  }

  pipeline_schedule const& schedule(training_plan const& plan) const {
    auto const key = std::tuple(plan.schedule, plan.pp, plan.micro_batches, plan.virtual_stages);
    auto it = schedules_.find(key);
    if (it == schedules_.end())
      it =
          schedules_.emplace(key, make_schedule(plan.schedule, plan.pp, plan.micro_batches, plan.virtual_stages)).first;
    return it->second;
  }

  gpt_config config_;
  std::vector<stage_spec> specs_;
  layer_costs costs_;
  mutable std::map<std::size_t, std::vector<model_part>> partitions_;
  mutable std::map<std::tuple<schedule_kind, std::size_t, std::size_t, std::size_t>, pipeline_schedule> schedules_;
  mutable std::map<std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t>, kept_bytes> kept_;
};

}  // namespace shardmesh::parallel
