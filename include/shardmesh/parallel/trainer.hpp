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
// calls, which the trainer makes between stages and, through the mesh's
// progress hook, after every product); all complete before the optimizer step. The loss of every
// micro-batch is normalised by the number of target tokens of the whole
// step that are not padding (a negative target), agreed on by every rank
// before the first forward, so the update does not depend on how the batch
// was split. Then the gradient is
// clipped by its global norm (every element of every parameter counted
// once, whatever its layout) and the optimizer updates each rank's block
// of the state (optimizer.hpp). ZeRO-3 gathers each stage's parameters just
// before its forward and its backward, starts the next stage's gather
// early, and frees them after. Every layout comes from state_sharding.hpp.

#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/parallel/detail/gradient_bucket.hpp"
#include "shardmesh/parallel/detail/trainable.hpp"
#include "shardmesh/parallel/memory_report.hpp"
#include "shardmesh/parallel/optimizer.hpp"
#include "shardmesh/parallel/parameter.hpp"
#include "shardmesh/parallel/state_sharding.hpp"
#include "shardmesh/runtime/progress.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
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
  bool overlap = true;  // start each bucket's reduction during backward (false: all after it, to compare)
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

namespace detail {

// The targets that are not padding, over every rank (the same on each).
template <class MemorySpace>
double counted_targets(dynamic_dtensor<int, 2, MemorySpace> const& targets,
                       execution_space_of<MemorySpace> const& exec) {
  auto const t = ops::local::flat(targets.local());
  double local = 0;
  Kokkos::parallel_reduce(
      "shardmesh::counted_targets", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, t.size()),
      KOKKOS_LAMBDA(std::size_t i, double& acc) { acc += t(i) < 0 ? 0.0 : 1.0; }, local);
  axis_set const axes = sharding_axes(targets.bound());
  if (axes.empty()) return local;
  Kokkos::View<double*, Kokkos::HostSpace> sum("shardmesh::counted_targets", 1);
  sum(0) = local;
  all_reduce(targets.mesh().group(axes), sum, reduce_op::sum, Kokkos::DefaultHostExecutionSpace{});
  return sum(0);
}

}  // namespace detail

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
    double loss = 0;            // the mean over the step's target tokens
    double grad_norm = 0;       // the global norm before clipping
    double reduction_wait = 0;  // seconds spent after backward finishing the gradients' reductions
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
  ~trainer() {
    model_->trace({});
    mesh_.state<progress_hook>().set({});
  }

  // Called like the model's trace hook, for the stages of every micro-batch.
  void trace(typename Model::trace_hook hook) { user_trace_ = std::move(hook); }

  [[nodiscard]] training_options const& options() const { return options_; }
  [[nodiscard]] std::size_t steps() const { return steps_; }
  [[nodiscard]] std::size_t bucket_count() const { return buckets_.size(); }
  // The parameters of each bucket, in the order the buckets start.
  [[nodiscard]] std::vector<std::vector<std::string>> bucket_members() const {
    std::vector<std::vector<std::string>> out;
    for (auto const& b : buckets_) {
      out.emplace_back();
      for (member const* m : b->members()) out.back().push_back(m->name());
    }
    return out;
  }
  // What the last step held, per phase: "forward" and "backward" (the
  // largest over the micro-batches), "reduction", "update".
  [[nodiscard]] memory_report const& memory() const { return memory_; }

  step_result step(std::span<micro_batch const> batch, exec_type const& exec = {}) {
    if (batch.empty()) throw invalid_batch_error("training: a step needs at least one micro-batch");
    double tokens = 0;
    for (micro_batch const& m : batch) tokens += detail::counted_targets(m.targets, exec);
    if (tokens == 0) throw invalid_batch_error("training: every target of the step is padding");
    step_result r;
    exec_ = exec;
    // Between the model's products too, not only between its stages (runtime/progress.hpp).
    progress_hook& hook = mesh_.state<progress_hook>();
    hook.set([this] { advance(); });
    memory_phases phases(mesh_.ledger(), {"forward", "backward", "reduction", "update"});
    for (std::size_t a = 0; a < batch.size(); ++a) {
      last_micro_batch_ = a + 1 == batch.size();
      phases.begin();
      r.loss += static_cast<double>(model_->forward(batch[a].ids, batch[a].targets, tokens, exec).loss);
      phases.end(0);
      phases.begin();
      model_->backward(exec);
      phases.end(1);
    }
    phases.begin();
    auto const reducing = std::chrono::steady_clock::now();
    reduce(exec);
    hook.set({});
    r.reduction_wait = std::chrono::duration<double>(std::chrono::steady_clock::now() - reducing).count();
    phases.end(2);
    phases.begin();
    r.grad_norm = global_norm(exec);
    double const scale =
        options_.clip_norm > 0 && r.grad_norm > options_.clip_norm ? options_.clip_norm / (r.grad_norm + 1e-6) : 1.0;
    ++steps_;
    for (auto& p : parameters_) {
      p->update(options_.method, steps_, scale, exec);
      p->zero_grad();
    }
    phases.end(3);
    memory_ = phases.report();
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
        // 1 to 32767 (MPI's least upper bound for tags); 0 is other exchanges'. Buckets
        // 32766 apart never overlap in time.
        int const tag = static_cast<int>(buckets_.size() % 32766) + 1;
        buckets_.push_back(std::make_unique<bucket>(std::move(open), dp_, tag));
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
    if (options_.overlap && !e.before && !forward && last_micro_batch_)
      for (auto& b : buckets_)
        if (!b->started() && b->ready_stage() == e.stage) b->start(exec_);
    advance();
    if (user_trace_) user_trace_(e);
  }

  // Advances every reduction and gather in flight without blocking.
  void advance() {
    for (auto& b : buckets_) b->progress();
    for (auto& p : parameters_) p->progress();
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
  memory_report memory_;
};

}  // namespace shardmesh::parallel
