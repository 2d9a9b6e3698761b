#pragma once
// The planner's memory model, for one rank of a plan: the bytes of
// parameters, gradients, optimizer state and activations the trainer's
// memory ledger records on it, from the model's description
// (model_description.hpp: each stage's parameters and saved tensors with
// their layouts on the stage mesh) and the state layouts the trainer uses
// (state_layouts_for), with the pipeline chunks partition_layers gives the
// rank's stage: uneven shards, blocks that differ, and the stages placed
// with the first and last chunks included.
//
// Per category, the most held at once during a step:
//   parameters       the stored values, and with ZeRO-3 the values of two
//                    model stages gathered at once (the trainer gathers a
//                    stage's parameters just before it runs and prefetches
//                    the next: the adjacent stage in a chunk, and at an
//                    action's last stage the next action's first)
//   gradients        the unreduced gradients of every parameter the rank
//                    holds: they are all alive at the end of the last
//                    backward when micro-batches accumulate or a pipeline
//                    holds buckets until a chunk's backward is done. (One
//                    stage without accumulation starts buckets during the
//                    backward: then this is the bound, reached with one
//                    bucket.) ZeRO-3 on dp > 1 buckets each model stage
//                    apart: a chunk's gradients appear at its first
//                    backward (its first W, when split) and go at its last,
//                    stage by stage as each stage's bucket starts during a
//                    last B, all at once after a last W; with one
//                    micro-batch and B unsplit, one stage's at a time
//   optimizer state  each state tensor (Adam's two, SGD's momentum) in the state layout
//   activations      what the stages keep from a forward to its backward,
//                    for every (micro-batch, chunk) the stage holds at
//                    once: the schedule's actions on this stage, in order,
//                    add a chunk's bytes at its forward and remove them at
//                    its backward (B, when split). With a zero-bubble
//                    schedule, what the deferred weight gradients hold
//                    from B to W is workspace.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/plan/training_plan.hpp"
#include "shardmesh/strategy/layer_partition.hpp"
#include "shardmesh/strategy/pipeline_schedule.hpp"
#include "shardmesh/strategy/pipeline_simulation.hpp"
#include "shardmesh/strategy/state_sharding.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace shardmesh::parallel {

struct state_memory {
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0;  // bytes, the most held at once
};

// The model's stages per stage mesh and micro-batch, the partitions of its
// blocks into pipeline chunks and the schedules, each made once (a search
// asks for thousands of plans). Holds the description by reference.
class memory_model {
 public:
  explicit memory_model(model_description const& model) : model_(&model) {
    std::vector<stage_description> const stages = stages_on_one_rank(model);
    costs_ = partition_costs(stages);
    for (std::size_t s = 0; s < stages.size(); ++s)
      (stages[s].place == stage_place::first   ? first_
       : stages[s].place == stage_place::block ? blocks_
                                               : last_)
          .push_back(s);
    if (blocks_.size() != model.blocks())
      throw error("memory_model: the description places " + std::to_string(blocks_.size()) + " stages in blocks of " +
                  std::to_string(model.blocks()));
  }

  [[nodiscard]] model_description const& model() const { return *model_; }

  // The stages of the plan's stage mesh, for its micro-batch, as its recomputation keeps and runs them.
  [[nodiscard]] std::vector<stage_description> const& stages(training_plan const& plan) const {
    std::size_t const samples = plan.micro_batch * plan.batch_replicas();
    auto const key = std::tuple(plan.dp, plan.cp, plan.ep, plan.tp, samples, plan.recompute);
    auto it = stages_.find(key);
    if (it == stages_.end()) {
      mesh_shape const mesh = stage_mesh(plan);
      it = stages_
               .emplace(key, with_recomputation(model_->stages(mesh, samples), plan.recompute,
                                                model_->boundary(mesh, samples)))
               .first;
    }
    return it->second;
  }

  // The model stages each pipeline chunk of stage `stage` holds, chunk by chunk, in forward order.
  [[nodiscard]] std::vector<std::vector<std::size_t>> held_stages(training_plan const& plan, std::size_t stage) const {
    std::vector<model_part> const& parts = partition(plan.pp * plan.virtual_stages);
    std::vector<std::vector<std::size_t>> out;
    for (std::size_t chunk = 0; chunk < plan.virtual_stages; ++chunk) {
      model_part const& part = parts[chunk * plan.pp + stage];
      std::vector<std::size_t> held;
      if (part.embedding) held = first_;
      held.insert(held.end(), blocks_.begin() + static_cast<std::ptrdiff_t>(part.first),
                  blocks_.begin() + static_cast<std::ptrdiff_t>(part.last));
      if (part.head) held.insert(held.end(), last_.begin(), last_.end());
      out.push_back(std::move(held));
    }
    return out;
  }

  // Rank `rank` of the plan's mesh dp x cp x ep x pp x tp (row-major, as
  // device_mesh numbers ranks), in the plan's precision, for an optimizer
  // keeping `state_tensors` tensors per parameter. Precondition:
  // training_plan_error is empty.
  [[nodiscard]] state_memory state(training_plan const& plan, std::size_t rank, std::size_t state_tensors) const {
    std::size_t const tp_coordinate = rank % plan.tp, stage = rank / plan.tp % plan.pp;
    std::size_t const replica = rank / plan.tp / plan.pp;  // its (dp, cp, ep) coordinates, row-major
    std::size_t const stage_rank = replica * plan.tp + tp_coordinate;
    element_bytes const bytes = bytes_of(plan.compute, plan.gradients);
    state_memory out = parameter_state(plan, stage, stage_rank, bytes, state_tensors);
    out.activations = activations(plan, stage, stage_rank, bytes);
    return out;
  }

  // The plan's schedule, made and checked once (the time model simulates it too).
  [[nodiscard]] pipeline_schedule const& schedule(training_plan const& plan) const {
    auto const key = std::tuple(plan.schedule, plan.pp, plan.micro_batches, plan.virtual_stages);
    auto it = schedules_.find(key);
    if (it == schedules_.end()) {
      pipeline_schedule s = make_schedule(plan.schedule, plan.pp, plan.micro_batches, plan.virtual_stages);
      if (fixed_text const e = simulate(s).error; !e.empty()) throw error("memory_model: " + std::string(e.view()));
      it = schedules_.emplace(key, std::move(s)).first;
    }
    return it->second;
  }

  // dp, cp and ep where above 1, tp: the plan's mesh without pp.
  [[nodiscard]] static mesh_shape stage_mesh(training_plan const& plan) {
    mesh_shape out{{"dp", plan.dp}};
    if (plan.cp > 1) out.axes[out.ndim++] = {"cp", plan.cp};
    if (plan.ep > 1) out.axes[out.ndim++] = {"ep", plan.ep};
    out.axes[out.ndim++] = {"tp", plan.tp};
    return out;
  }

 private:
  [[nodiscard]] state_memory parameter_state(training_plan const& plan, std::size_t stage, std::size_t stage_rank,
                                             element_bytes const& bytes, std::size_t state_tensors) const {
    mesh_shape const mesh = stage_mesh(plan);
    std::vector<stage_description> const& stages = this->stages(plan);
    std::size_t compute = 0, stored = 0, reduced = 0, state = 0;
    std::size_t gathered = 0;  // ZeRO-3: the most compute-layout elements of two stages gathered at once
    std::vector<std::size_t> chunk_total, chunk_largest;  // per chunk: compute-layout elements, of its largest stage
    std::vector<std::vector<std::size_t>> units;          // per chunk: its stages with parameters
    std::map<std::size_t, std::size_t> unit_elements;     // their compute-layout elements
    for (std::vector<std::size_t> const& chunk : held_stages(plan, stage)) {
      std::size_t previous = 0;
      chunk_total.push_back(0);
      chunk_largest.push_back(0);
      units.emplace_back();
      for (std::size_t s : chunk) {
        std::size_t here = 0;
        for (parameter_spec const& p : stages[s].parameters) {
          tensor_index global{};
          std::copy(p.extents.begin(), p.extents.end(), global.begin());
          state_layouts const l = state_layouts_for(bind(mesh, p.placement), plan.zero, 0);
          here += local_size(mesh, l.compute, global, stage_rank);
          stored += local_size(mesh, l.stored, global, stage_rank);
          reduced += local_size(mesh, l.reduced, global, stage_rank);
          state += local_size(mesh, l.state, global, stage_rank);
        }
        compute += here;
        if (!stages[s].parameters.empty()) {
          units.back().push_back(s);
          unit_elements[s] = here;
        }
        gathered = std::max(gathered, previous + here);
        chunk_total.back() += here;
        chunk_largest.back() = std::max(chunk_largest.back(), here);
        previous = here;
      }
    }
    bool const zero3 = plan.zero == zero_stage::parameters;
    if (zero3) gathered = std::max(gathered, across_actions(plan, stage, units, unit_elements));
    std::size_t const unreduced =
        zero3 && plan.dp > 1 ? unreduced_with_stage_buckets(plan, stage, chunk_total, chunk_largest) : compute;
    return {(stored + (zero3 ? gathered : 0)) * bytes.value, std::max(unreduced, reduced) * bytes.gradient,
            (state_tensors + (bytes.master ? 1 : 0)) * state * bytes.state};
  }

  // ZeRO-3: the most compute-layout elements gathered at an action's last
  // unit, where the trainer prefetches the first unit of the next action
  // that uses parameters (forward, B): the two units' elements, where they
  // differ.
  [[nodiscard]] std::size_t across_actions(training_plan const& plan, std::size_t stage,
                                           std::vector<std::vector<std::size_t>> const& units,
                                           std::map<std::size_t, std::size_t> const& elements) const {
    std::size_t most = 0, last = npos;
    for (pipeline_action const& a : schedule(plan).actions[stage]) {
      if (!reads_parameters(a.op)) continue;
      std::size_t const next = stage_reached(a.op, units[a.chunk], true);
      if (last != npos && next != npos && next != last) most = std::max(most, elements.at(last) + elements.at(next));
      last = stage_reached(a.op, units[a.chunk], false);
    }
    return most;
  }

  // The most unreduced gradient elements alive at once when each model
  // stage is a bucket of its own (ZeRO-3 on dp > 1), from this stage's
  // actions: the actions that make weight gradients (B, or W when split).
  [[nodiscard]] std::size_t unreduced_with_stage_buckets(training_plan const& plan, std::size_t stage,
                                                         std::vector<std::size_t> const& total,
                                                         std::vector<std::size_t> const& largest) const {
    auto const& actions = schedule(plan).actions[stage];
    auto const makes = [](pipeline_action const& a) {
      return a.op == pipeline_op::backward || a.op == pipeline_op::backward_weight;
    };
    std::vector<std::size_t> first(total.size(), npos), last(total.size(), npos);
    for (std::size_t k = 0; k < actions.size(); ++k)
      if (makes(actions[k])) {
        if (first[actions[k].chunk] == npos) first[actions[k].chunk] = k;
        last[actions[k].chunk] = k;
      }
    std::size_t alive = 0, most = 0;
    for (std::size_t k = 0; k < actions.size(); ++k) {
      std::size_t const c = actions[k].chunk;
      if (!makes(actions[k])) continue;
      if (k == first[c] && k == last[c] && actions[k].op == pipeline_op::backward) {  // each stage made, then sent
        most = std::max(most, alive + largest[c]);
        continue;
      }
      if (k == first[c]) most = std::max(most, alive += total[c]);
      if (k == last[c]) alive -= total[c];
    }
    return most;
  }

  [[nodiscard]] std::size_t activations(training_plan const& plan, std::size_t stage, std::size_t stage_rank,
                                        element_bytes const& bytes) const {
    mesh_shape const mesh = stage_mesh(plan);
    std::vector<stage_description> const& stages = this->stages(plan);
    std::vector<std::size_t> chunk_bytes;
    for (std::vector<std::size_t> const& chunk : held_stages(plan, stage)) {
      std::size_t held = 0;
      for (std::size_t s : chunk)
        for (saved_spec const& t : stages[s].saved)
          held += local_elements(mesh, t.placement, t.extents, stage_rank, t.per_row) *
                  (t.per_row ? bytes.statistic : bytes.value);
      chunk_bytes.push_back(held);
    }
    std::size_t held = 0, most = 0;
    for (pipeline_action const& a : schedule(plan).actions[stage]) {
      if (a.op == pipeline_op::forward) most = std::max(most, held += chunk_bytes[a.chunk]);
      if (a.op == pipeline_op::backward || a.op == pipeline_op::backward_input) held -= chunk_bytes[a.chunk];
    }
    return most;
  }

  std::vector<model_part> const& partition(std::size_t chunks) const {
    auto it = partitions_.find(chunks);
    if (it == partitions_.end())
      it = partitions_.emplace(chunks, partition_layers(model_->blocks(), chunks, costs_)).first;
    return it->second;
  }

  model_description const* model_;
  layer_costs costs_;
  std::vector<std::size_t> first_, blocks_, last_;  // the stages placed with the first chunk, in blocks, with the last
  mutable std::map<std::tuple<std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, recompute_mode>,
                   std::vector<stage_description>>
      stages_;
  mutable std::map<std::size_t, std::vector<model_part>> partitions_;
  mutable std::map<std::tuple<schedule_kind, std::size_t, std::size_t, std::size_t>, pipeline_schedule> schedules_;
};

}  // namespace shardmesh::parallel
