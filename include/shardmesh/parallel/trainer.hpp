#pragma once
// The data-parallel training step, with ZeRO state sharding chosen at run
// time, on any mesh with a "dp" axis (and the model's own axes, "tp"):
//
//   parallel::trainer train(model, {.stage = zero_stage::gradients, .method = adamw{.lr = 1e-3}, .clip_norm = 1});
//   auto r = train.step(micro_batches);   // r.loss, r.grad_norm
//
// A step runs forward and backward on each micro-batch (gradient
// accumulation: gradients add up unreduced, partial on "dp"); during the
// last micro-batch's backward, the gradients go into buckets (about
// bucket_bytes each, in the order backward produces them) whose reduction
// starts as soon as the bucket's last gradient exists, and is advanced
// between stages (MPI progresses non-blocking collectives only inside its
// calls); all complete before the optimizer step. The loss of every
// micro-batch is normalised by the number of target tokens of the whole
// step, which every rank knows from the tensors' global extents, so the
// update does not depend on how the batch was split. Then the gradient is
// clipped by its global norm (every element of every parameter counted
// once, whatever its layout) and the optimizer updates each rank's block
// of the state (optimizer.hpp). ZeRO-3 gathers each stage's parameters just
// before its forward and its backward, starts the next stage's gather
// early, and frees them after. Every layout comes from state_sharding.hpp.

#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/parallel/detail/gradient_bucket.hpp"
#include "shardmesh/parallel/detail/trainable.hpp"
#include "shardmesh/parallel/optimizer.hpp"
#include "shardmesh/parallel/parameter.hpp"
#include "shardmesh/parallel/state_sharding.hpp"

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

struct training_options {
  zero_stage stage = zero_stage::none;
  optimizer method = adamw{};
  double clip_norm = 0;                              // the largest global gradient norm; 0: no clipping
  std::size_t bucket_bytes = std::size_t{25} << 20;  // gradient bucket size (at least one parameter each)
};

// Why the options cannot be used; empty when they can. The same on every
// rank for the same options, and checked before anything communicates.
[[nodiscard]] inline std::string training_options_error(training_options const& o) {
  if (static_cast<unsigned>(o.stage) > 3)
    return "training: ZeRO stage " + std::to_string(static_cast<unsigned>(o.stage)) + " does not exist";
  if (o.bucket_bytes == 0) return "training: the gradient bucket size must be at least 1 byte, not 0";
  if (!std::isfinite(o.clip_norm) || o.clip_norm < 0)
    return "training: the clipping norm is " + std::to_string(o.clip_norm) + ", which is not 0 (none) or positive";
  return optimizer_error(o.method);
}

template <class Model>
class trainer {
 public:
  using value_type = typename Model::value_type;
  using memory_space = typename Model::memory_space;
  using exec_type = execution_space_of<memory_space>;
  using ids_tensor = typename Model::ids_tensor;

  struct micro_batch {
    ids_tensor ids, targets;  // [samples, sequence], the samples sharded on "dp"
  };
  struct step_result {
    double loss = 0;       // the mean over the step's target tokens
    double grad_norm = 0;  // the global norm before clipping
  };

  // Collective: moves every parameter to where its stage keeps it.
  trainer(Model& model, device_mesh const& mesh, training_options const& options, exec_type const& exec = {})
      : model_(&model), mesh_(mesh), options_(options), dp_(mesh.shape().find("dp")) {
    if (std::string const problem = training_options_error(options); !problem.empty())
      throw invalid_option_error(problem);
    for (std::size_t s = 0; s < model.stage_count(); ++s)
      model.for_each_parameter_of(s, [&](std::string const&, auto& p) { adopt(p, s, exec); });
    make_buckets();
    model.trace([this](auto const& event) { on_stage(event); });
  }
  trainer(trainer const&) = delete;
  trainer& operator=(trainer const&) = delete;
  ~trainer() { model_->trace({}); }

  // Called like the model's trace hook, for the stages of every micro-batch.
  void trace(typename Model::trace_hook hook) { user_trace_ = std::move(hook); }

  [[nodiscard]] training_options const& options() const { return options_; }
  [[nodiscard]] std::size_t steps() const { return steps_; }
  [[nodiscard]] std::size_t bucket_count() const { return buckets_.size(); }

  step_result step(std::span<micro_batch const> batch, exec_type const& exec = {}) {
    if (batch.empty()) throw invalid_batch_error("training: a step needs at least one micro-batch");
    double tokens = 0;  // from global extents: the same on every rank
    for (micro_batch const& m : batch)
      tokens += static_cast<double>(m.targets.global_extents()[0] * m.targets.global_extents()[1]);
    step_result r;
    exec_ = exec;
    for (std::size_t a = 0; a < batch.size(); ++a) {
      last_micro_batch_ = a + 1 == batch.size();
      r.loss += static_cast<double>(model_->forward(batch[a].ids, batch[a].targets, tokens, exec).loss);
      model_->backward(exec);
    }
    reduce(exec);
    r.grad_norm = global_norm(exec);
    double const scale =
        options_.clip_norm > 0 && r.grad_norm > options_.clip_norm ? options_.clip_norm / (r.grad_norm + 1e-6) : 1.0;
    ++steps_;
    for (auto& p : parameters_) {
      p->update(options_.method, steps_, scale, exec);
      p->zero_grad();
    }
    return r;
  }

 private:
  using member = detail::trainable<value_type, memory_space>;
  using bucket = detail::gradient_bucket<value_type, memory_space>;

  template <class P>
  void adopt(P& p, std::size_t stage, exec_type const& exec) {
    bound_layout const compute = p.compute_layout();
    if (auto const problem = state_sharding_error(mesh_.shape(), compute, dp_); !problem.empty())
      throw invalid_layout_error(p.name() + ": " + std::string(problem.view()));
    using concrete = detail::trainable_parameter<typename P::tensor::value_type, P::tensor::rank, memory_space>;
    parameters_.push_back(std::make_unique<concrete>(p, stage, state_layouts_for(compute, options_.stage, dp_), exec));
  }

  [[nodiscard]] bool data_parallel() const { return dp_ != npos && mesh_.shape()[dp_].extent > 1; }

  // Buckets in the order backward completes gradients: stages last to
  // first, parameters last to first within a stage.
  void make_buckets() {
    if (!data_parallel()) return;
    std::vector<member*> open;
    std::size_t bytes = 0;
    for (std::size_t i = parameters_.size(); i-- > 0;) {
      member* m = parameters_[i].get();
      open.push_back(m);
      bytes += m->rows() * m->row_elements() * sizeof(value_type);
      if (bytes >= options_.bucket_bytes || i == 0) {
        buckets_.push_back(std::make_unique<bucket>(std::move(open), dp_));
        open.clear();
        bytes = 0;
      }
    }
  }

  void on_stage(typename Model::stage_event const& e) {
    bool const forward = e.phase == "forward";
    if (options_.stage == zero_stage::parameters) {
      if (e.before) {
        for_stage(e.stage, [&](member& m) { m.gather(exec_); });
        std::size_t const next = forward ? e.stage + 1 : e.stage - 1;
        if (forward || e.stage > 0) for_stage(next, [&](member& m) { m.gather_async(exec_); });
      } else {
        for_stage(e.stage, [&](member& m) { m.release(); });
      }
    }
    if (!e.before && !forward && last_micro_batch_)
      for (auto& b : buckets_)
        if (!b->started() && b->ready_stage() == e.stage) b->start(exec_);
    for (auto& b : buckets_) b->progress();
    for (auto& p : parameters_) p->progress();
    if (user_trace_) user_trace_(e);
  }

  template <class Visit>
  void for_stage(std::size_t s, Visit&& visit) {
    for (auto& p : parameters_)
      if (p->stage() == s) visit(*p);
  }

  // Every gradient into its reduced layout: the buckets' collectives
  // completed, or the algebra's plan per parameter without a dp axis.
  void reduce(exec_type const& exec) {
    if (!data_parallel()) {
      for (auto& p : parameters_) p->reduce(exec);
      return;
    }
    for (auto& b : buckets_) {
      if (!b->started()) b->start(exec);
      b->finish(exec);
    }
  }

  // sqrt of the sum of squares of every gradient element, each counted once.
  double global_norm(exec_type const& exec) {
    Kokkos::View<double*, Kokkos::HostSpace> sum("shardmesh::gradient_norm", 1);
    for (auto& p : parameters_) sum(0) += p->counted_sum_of_squares(exec);
    all_reduce(mesh_.comm(), sum, reduce_op::sum, Kokkos::DefaultHostExecutionSpace{});
    return std::sqrt(sum(0));
  }

  Model* model_;
  device_mesh mesh_;
  training_options options_;
  std::size_t dp_;
  std::vector<std::unique_ptr<member>> parameters_;  // in forward order
  std::vector<std::unique_ptr<bucket>> buckets_;     // in backward order
  typename Model::trace_hook user_trace_;
  exec_type exec_;
  bool last_micro_batch_ = false;
  std::size_t steps_ = 0;
};

}  // namespace shardmesh::parallel
