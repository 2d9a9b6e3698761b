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
// bucket_bytes each, in the order backward produces them; with ZeRO-3 one
// per model stage) whose reduction
// starts as soon as the bucket's last gradient exists, and is advanced
// between stages (MPI progresses non-blocking collectives only inside its
// calls, which the trainer makes between stages and, through the mesh's
// progress hook, after every product); all complete before the optimizer step. The step's
// loss is the mean over its target tokens that are not padding (a negative
// target), whatever the split into micro-batches. The host reads one thing
// per step, after the reductions (train/detail/step_scalars.hpp): the loss,
// the counted targets and the gradients' sum of squares, summed over the
// mesh on the device. So the forward averages over every target position
// of the step, a number the host knows, and the update rescales by
// positions / counted (1 without padding). Then the gradient is
// clipped by its global norm (every element of every parameter counted
// once, whatever its layout) and the optimizer updates each rank's block
// of the state (optimizer.hpp); with ZeRO-1 and 2, each rank updates its
// rows of each bucket's values and one all-gather per bucket completes
// them (train/detail/fused_gather.hpp), while the next bucket updates.
// ZeRO-3 gathers each model stage's parameters by one all-gather just
// before its forward and its backward, starts the next stage's gather
// early, and frees them after. The gathers' copies run on a side instance
// (runtime/side_instance.hpp; communicate_on() sets another). Every layout
// comes from state_sharding.hpp.
//
// Pipelines: on a mesh with a "pp" axis, each rank passes the v chunks of
// the model its stage holds (each on the stage's submesh, every axis but
// "pp"; layer_partition.hpp says which layers), and a step runs the
// schedule (pipeline_schedule.hpp) of its stage, with the step's
// micro-batches as the pipeline's: forward and backward of a chunk on a
// micro-batch, activations and gradients to and from the neighbouring
// stages (stage_transfers.hpp), each forward's saved activations kept per
// micro-batch until its backward (the memory ledger's activations: what
// the layers saved, kept from the end of a forward to the start of its
// backward), and with a zero-bubble schedule the
// weight gradients deferred from B to W (weight_gradients.hpp). Everything
// above (ZeRO stages, buckets, clipping) works inside each stage unchanged;
// the norm and the loss are summed over the stages. Without "pp" the same
// runs as one stage: 1F1B on one stage is forward and backward in turn.
//
// Precision: a model of bf16 or fp16 computes in that type; its gradients,
// their reductions and the optimizer (a float master copy of each
// parameter beside its state, sharded by the ZeRO stage as the state is)
// run in float (nn/parameter.hpp). An fp16 model's loss is scaled
// (loss_scaling): a step that overflows is skipped on every rank.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/comm/all_gather.hpp"
#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/comm/barrier.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/nn/weight_gradients.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/runtime/progress.hpp"
#include "shardmesh/runtime/side_instance.hpp"
#include "shardmesh/strategy/layer_partition.hpp"
#include "shardmesh/strategy/learning_rate.hpp"
#include "shardmesh/strategy/pipeline_simulation.hpp"
#include "shardmesh/strategy/precision.hpp"
#include "shardmesh/strategy/state_sharding.hpp"
#include "shardmesh/train/detail/fused_gather.hpp"
#include "shardmesh/train/detail/gradient_bucket.hpp"
#include "shardmesh/train/detail/stage_transfers.hpp"
#include "shardmesh/train/detail/step_scalars.hpp"
#include "shardmesh/train/detail/trainable.hpp"
#include "shardmesh/train/memory_report.hpp"
#include "shardmesh/train/model_contract.hpp"
#include "shardmesh/train/optimizer.hpp"

#include <Kokkos_Core.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

// fp16's dynamic loss scaling (bf16 and float need none; the trainer uses
// it for models of fp16 only): the loss is multiplied by the scale before
// backward, so that small gradients stay above fp16's subnormals; a step
// whose gradients hold an inf or a NaN on any rank is skipped on every rank
// (the global norm, summed over the whole mesh, is then not finite) and the
// scale multiplied by `backoff`; after `interval` steps in a row without
// one, by `growth`. PyTorch's GradScaler defaults.
struct loss_scaling {
  bool enabled = true;
  double initial = 65536;
  double growth = 2;
  double backoff = 0.5;
  std::size_t interval = 2000;
};

struct training_options {
  zero_stage stage = zero_stage::none;
  optimizer method = adamw{};
  learning_rate_schedule lr_schedule = {};  // the learning rate's factor at each update (learning_rate.hpp); empty: 1
  // Whether weight decay applies to a parameter, by its name and number of dimensions; empty: to those of
  // two or more (matrices, tables), not to norms' gains or biases.
  std::function<bool(std::string const& name, std::size_t rank)> decays = {};
  double clip_norm = 0;                              // the largest global gradient norm; 0: no clipping
  std::size_t bucket_bytes = std::size_t{25} << 20;  // gradient bucket size (at least one parameter each)
  bool overlap = true;  // start each bucket's reduction during backward (false: all after it, to compare)
  schedule_kind schedule = schedule_kind::one_f_one_b;  // the pipeline's schedule
  bool timeline = false;      // start each step at a barrier and time every compute action (timeline())
  loss_scaling scaling = {};  // fp16 models only
  // What gradients are kept in, between micro-batches and until the update: fp32, or a bf16 or fp16 model's own
  // type (half the bytes; each micro-batch's gradient still adds in float and rounds once).
  precision gradient_type = precision::fp32;
  // What gradients are summed in over "dp": fp32 (widened from any model's; exact but for the final rounding),
  // or bf16 (half the bytes, each message's sums rounded: gradient_bucket.hpp).
  precision gradient_reduction = precision::fp32;
};

// Why the options cannot be used; empty when they can. The same on every
// rank for the same options, and checked before anything communicates.
[[nodiscard]] inline std::string training_options_error(training_options const& o) {
  if (static_cast<unsigned>(o.stage) > 3)
    return "training: ZeRO stage " + std::to_string(static_cast<unsigned>(o.stage)) + " does not exist";
  if (o.bucket_bytes == 0) return "training: the gradient bucket size must be at least 1 byte, not 0";
  if (!std::isfinite(o.clip_norm) || o.clip_norm < 0)
    return "training: the clipping norm is " + std::to_string(o.clip_norm) + ", which is not 0 (none) or positive";
  if (o.gradient_reduction == precision::fp16)
    return "training: gradients are reduced in fp32 or bf16, not fp16 (its range would overflow)";
  loss_scaling const& l = o.scaling;
  if (!std::isfinite(l.initial) || l.initial <= 0 || !std::isfinite(l.growth) || l.growth < 1 || !(l.backoff > 0) ||
      l.backoff >= 1 || l.interval == 0)
    return "training: loss scaling needs a positive finite initial scale, growth >= 1, backoff in (0, 1) and an "
           "interval of at least 1 step";
  return o.method.error();
}

namespace detail {

// This rank's targets that are not padding, into `out` (nothing waits).
template <class MemorySpace>
void count_targets(dynamic_dtensor<int, 2, MemorySpace> const& targets,
                   typename step_scalars<MemorySpace>::slot const& out, execution_space_of<MemorySpace> const& exec) {
  auto const t = ops::local::flat(targets.local());
  Kokkos::parallel_reduce(
      "shardmesh::counted_targets", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, t.size()),
      KOKKOS_LAMBDA(std::size_t i, double& acc) { acc += t(i) < 0 ? 0.0 : 1.0; }, out);
}

// How many ranks of a mesh of `ranks` hold each target: its copies on the
// axes of its mesh that do not shard it, and on the pipeline's stages.
template <class MemorySpace>
double target_copies(dynamic_dtensor<int, 2, MemorySpace> const& targets, std::size_t ranks) {
  return static_cast<double>(ranks / group_size(targets.mesh().shape(), sharding_axes(targets.bound())));
}

}  // namespace detail

template <class Model>
class trainer {
  static_assert(check_model_contract<Model>());

 public:
  using value_type = typename Model::value_type;
  using memory_space = typename Model::memory_space;
  using exec_type = execution_space_of<memory_space>;
  using ids_tensor = typename Model::ids_tensor;
  using activation = typename Model::activation;

  struct micro_batch {
    ids_tensor ids, targets;  // [samples, sequence], the samples sharded on "dp"
  };
  struct step_result {
    double loss = 0;            // the mean over the step's target tokens
    double grad_norm = 0;       // the global norm before clipping (not finite in a skipped step)
    double reduction_wait = 0;  // seconds spent after backward finishing the gradients' reductions
    bool skipped = false;       // fp16: an inf or a NaN in the gradients, no update (loss_scaling)
  };

  // Collective: moves every parameter to where its stage keeps it.
  trainer(Model& model, device_mesh const& mesh, training_options const& options, exec_type const& exec = {})
      : trainer(std::vector<Model*>{&model}, mesh, options, exec) {}

  // A pipeline stage: this rank's chunks of the model, chunk c being virtual
  // stage c p + s, on mesh.submesh of every axis but "pp". Collective over
  // the mesh; the partition is checked on every rank alike first.
  trainer(std::vector<Model*> chunks, device_mesh const& mesh, training_options const& options,
          exec_type const& exec = {})
      : chunks_(std::move(chunks)),
        mesh_(mesh),
        stage_mesh_(stage_mesh_of(mesh)),
        options_(options),
        pp_(mesh.shape().find("pp")),
        dp_(stage_mesh_.shape().find("dp")),
        side_(side_instance(exec)) {
    if (std::string const problem = training_options_error(options); !problem.empty())
      throw invalid_option_error(problem);
    if (chunks_.empty()) throw invalid_option_error("training: no model chunk to train");
    if (options.gradient_type != precision::fp32 && options.gradient_type != model_precision())
      throw invalid_option_error("training: gradients are kept in fp32 or in the model's own type (" +
                                 std::string(to_string(model_precision())) + "), not " +
                                 std::string(to_string(options.gradient_type)));
    check_partition();
    for (Model* chunk : chunks_) {
      chunk_stages_.emplace_back();
      for (std::size_t s = 0; s < chunk->stage_count(); ++s)
        chunk->for_each_parameter_of(s, [&](std::string const&, auto& p) {
          adopt(p, s, exec);
          if (chunk_stages_.back().empty() || chunk_stages_.back().back() != s) chunk_stages_.back().push_back(s);
        });
    }
    make_buckets();
    make_units();
    for (Model* chunk : chunks_) chunk->trace([this](auto const& event) { on_stage(event); });
  }
  trainer(trainer const&) = delete;
  trainer& operator=(trainer const&) = delete;
  ~trainer() {
    for (Model* chunk : chunks_) chunk->trace({});
    stage_mesh_.state<progress_hook>().set({});
    stage_mesh_.state<weight_gradient_deferral>().into(nullptr);
  }

  // Called like the model's trace hook, for the stages of every micro-batch.
  void trace(trace_hook hook) { user_trace_ = std::move(hook); }

  [[nodiscard]] training_options const& options() const { return options_; }
  // The optimizer's step count: steps skipped for an overflow do not count.
  [[nodiscard]] std::size_t steps() const { return steps_; }
  // fp16's loss scale now (1 where there is no loss scaling).
  [[nodiscard]] double loss_scale() const { return scaled() ? loss_scale_ : 1.0; }
  // Continues a run from its step `steps` (the optimizer's step count; a
  // checkpoint's, io/training_state.hpp).
  void resume_at(std::size_t steps) { steps_ = steps; }

  // visit(name, tensor) for every tensor of the training state this rank
  // holds, each in the layout its ZeRO stage keeps it: a parameter's stored
  // value as "parameters/<name>" (a bf16 or fp16 parameter's float master
  // copy, in the state layout, its value rounded from it after the visit:
  // checkpoints hold float whatever the run computes in, and resume in any
  // precision) and its optimizer state tensor i as
  // "optimizer/<name>/<state name>" (zeros before the first step). The names do not
  // depend on the stage or chunk that holds the parameter, so any other
  // pipeline finds them. Collective over each tensor's stage mesh when
  // `visit` is; the same order on every rank of a stage.
  template <class Visit>
  void for_each_state(Visit&& visit) {
    for (Model* chunk : chunks_)
      for (std::size_t s = 0; s < chunk->stage_count(); ++s)
        chunk->for_each_parameter_of(s, [&](std::string const& name, auto& p) {
          bound_layout const state = state_layouts_for(p.compute_layout(), options_.stage, dp_).state;
          if constexpr (std::remove_reference_t<decltype(p)>::has_master) {
            visit("parameters/" + name, p.master(state));  // the value as float, whatever the run computes in
            round_from_master(p, state);                   // the value again, from what the visit may have read
          } else {
            visit("parameters/" + name, p.stored());
          }
          for (std::size_t i = 0; i < options_.method.state_tensors(); ++i)
            visit("optimizer/" + name + "/" + options_.method.state_name(i), p.optimizer_state(i, state));
        });
  }
  [[nodiscard]] std::size_t stages() const { return pp_ == npos ? 1 : mesh_.shape()[pp_].extent; }
  [[nodiscard]] std::size_t stage() const { return pp_ == npos ? 0 : mesh_.coordinates()[pp_]; }
  [[nodiscard]] std::size_t bucket_count() const { return buckets_.size(); }
  // The instance the parameter gathers pack and unpack on, beside the
  // step's (runtime/side_instance.hpp: its own stream on a device, the
  // constructor's instance on the host).
  void communicate_on(exec_type const& side) { side_ = side; }
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
  // The last step's schedule, and (with options.timeline) when this rank
  // ran each of its compute actions, in seconds from the step's start.
  [[nodiscard]] pipeline_schedule const& schedule() const { return schedule_; }
  [[nodiscard]] std::vector<timed_action> const& timeline() const { return timeline_; }

  step_result step(std::span<micro_batch const> batch, exec_type const& exec = {}) {
    if (batch.empty()) throw invalid_batch_error("training: a step needs at least one micro-batch");
    double const lr_factor = options_.lr_schedule ? options_.lr_schedule(steps_ + 1) : 1.0;
    if (!std::isfinite(lr_factor) || lr_factor < 0)  // a function of the step alone: the same on every rank
      throw invalid_option_error("training: the learning-rate schedule gives " + std::to_string(lr_factor) +
                                 " at update " + std::to_string(steps_ + 1) + ", not a finite factor of at least 0");
    double positions = 0;  // every target position of the step, padding included
    for (micro_batch const& m : batch)
      positions += static_cast<double>(m.targets.global_extents()[0] * m.targets.global_extents()[1]);
    prepare_schedule(batch.size());
    step_result r;
    exec_ = exec;
    scalars_.begin(batch.size(), parameters_.size(), exec);
    for (std::size_t m = 0; m < batch.size(); ++m) detail::count_targets(batch[m].targets, scalars_.counted(m), exec);
    // Between the model's products too, not only between its stages (runtime/progress.hpp).
    progress_hook& hook = stage_mesh_.state<progress_hook>();
    hook.set([this] { advance(); });
    memory_phases phases(mesh_.ledger(), {"forward", "backward", "reduction", "update"});
    double const loss_scale = this->loss_scale();  // the loss averages over tokens / scale: gradients times scale
    run_schedule(batch, positions / loss_scale, phases, exec);
    phases.begin();
    auto const reducing = std::chrono::steady_clock::now();
    reduce(exec);
    hook.set({});
    r.reduction_wait = std::chrono::duration<double>(std::chrono::steady_clock::now() - reducing).count();
    phases.end(2);
    phases.begin();
    for (std::size_t i = 0; i < parameters_.size(); ++i)
      parameters_[i]->counted_sum_of_squares(exec, scalars_.squares(i));
    auto const totals = scalars_.read(mesh_.comm(), exec);  // the same on every rank
    double counted = 0;
    for (std::size_t m = 0; m < batch.size(); ++m)
      counted += totals.counted[m] / detail::target_copies(batch[m].targets, mesh_.comm().size());
    if (counted == 0) {
      for (auto& p : parameters_) p->zero_grad();
      phases.end(3);
      throw invalid_batch_error("training: every target of the step is padding");
    }
    double const rescale = positions / counted / loss_scale;  // the gradients' factor to the mean's
    r.loss = totals.loss * rescale;
    r.grad_norm = std::sqrt(totals.squares) * rescale;
    r.skipped = scaled() && !std::isfinite(r.grad_norm);
    if (r.skipped) {
      for (auto& p : parameters_) p->zero_grad();
    } else {
      double const clip =
          options_.clip_norm > 0 && r.grad_norm > options_.clip_norm ? options_.clip_norm / (r.grad_norm + 1e-6) : 1.0;
      ++steps_;
      update(lr_factor, clip * rescale, exec);
    }
    adjust_loss_scale(r.skipped);
    phases.end(3);
    memory_ = phases.report();
    return r;
  }

 private:
  using member = detail::trainable<value_type, memory_space>;
  using bucket = detail::gradient_bucket<value_type, memory_space>;
  using clock = std::chrono::steady_clock;

  using gather = detail::fused_gather<value_type, memory_space>;
  using flat_view = typename member::flat_view;

  // ZeRO-3: the parameters of one model stage, gathered together.
  struct stage_unit {
    std::vector<member*> members;
    std::unique_ptr<gather> fused;
    bool gathered = false;
  };

  // What a stage keeps for one chunk of one micro-batch between its actions.
  struct in_flight {
    activation input, output, gradient_in, gradient_out;
    saved_activations saved;
    weight_gradient_queue weights;
  };

  // fp16 models scale their loss unless told not to.
  [[nodiscard]] bool scaled() const { return std::is_same_v<value_type, fp16> && options_.scaling.enabled; }
  [[nodiscard]] static constexpr precision model_precision() {
    if constexpr (std::is_same_v<value_type, bf16>) return precision::bf16;
    if constexpr (std::is_same_v<value_type, fp16>) return precision::fp16;
    return precision::fp32;
  }

  // Backs off after a skipped step; grows after `interval` steps without one.
  void adjust_loss_scale(bool skipped) {
    if (!scaled()) return;
    loss_scaling const& l = options_.scaling;
    good_steps_ = skipped ? 0 : good_steps_ + 1;
    if (skipped) loss_scale_ *= l.backoff;
    if (good_steps_ == l.interval) {
      loss_scale_ *= l.growth;
      good_steps_ = 0;
    }
  }

  static device_mesh stage_mesh_of(device_mesh const& mesh) {
    std::size_t const pp = mesh.shape().find("pp");
    return pp == npos ? mesh : mesh.submesh(axis_set::all(mesh.shape().ndim) - axis_set::of(pp));
  }

  // Every chunk on the stage's submesh, the embedding in the first chunk
  // and the head in the last, the layers tiling the model in order, every
  // replica of a stage alike: checked on what every rank holds (one
  // all-gather), so every rank finds the same problem.
  void check_partition() {
    constexpr std::size_t most = 8, fields = 4;  // chunks per stage compared; first, last, embedding, head
    std::size_t const p = stages(), v = chunks_.size();
    Kokkos::View<long long*, Kokkos::HostSpace> mine("shardmesh::partition", 3 + most * fields);
    Kokkos::deep_copy(mine, -1);
    mine(0) = static_cast<long long>(stage());
    mine(1) = static_cast<long long>(v);
    mine(2) = 1;
    for (std::size_t c = 0; c < std::min(v, most); ++c) {
      model_part const& part = chunks_[c]->part();
      mine(2) &= chunks_[c]->mesh() == stage_mesh_ ? 1 : 0;
      long long const record[fields] = {static_cast<long long>(part.first), static_cast<long long>(part.last),
                                        part.embedding, part.head};
      std::copy(record, record + fields, mine.data() + 3 + c * fields);
    }
    Kokkos::View<long long*, Kokkos::HostSpace> all("shardmesh::partitions",
                                                    mine.size() * static_cast<std::size_t>(mesh_.comm().size()));
    all_gather(mesh_.comm(), mine, all, Kokkos::DefaultHostExecutionSpace{});
    std::vector<std::optional<std::pair<std::size_t, std::size_t>>> layers(p * v);
    for (std::size_t r = 0; r < static_cast<std::size_t>(mesh_.comm().size()); ++r) {
      long long const* rec = all.data() + r * mine.size();
      auto const st = static_cast<std::size_t>(rec[0]);
      std::string const rank = "pipeline: rank " + std::to_string(r) + " (stage " + std::to_string(st) + ")";
      if (static_cast<std::size_t>(rec[1]) != v || v > most)
        throw invalid_option_error(rank + " has " + std::to_string(rec[1]) + " chunks, rank " +
                                   std::to_string(mesh_.comm().rank()) + " " + std::to_string(v) +
                                   " (the same number everywhere, at most " + std::to_string(most) + ")");
      if (rec[2] == 0)
        throw invalid_mesh_error(rank + " has a chunk off its stage's submesh (every mesh axis but \"pp\")");
      if (pp_ == npos && v > 1)
        throw invalid_mesh_error("pipeline: " + std::to_string(v) +
                                 " chunks per rank need a \"pp\" axis in the mesh (of any extent)");
      for (std::size_t c = 0; c < v; ++c) {
        long long const* part = rec + 3 + c * fields;
        std::string const which = rank + ", chunk " + std::to_string(c);
        bool const first = c == 0 && st == 0, last = c + 1 == v && st + 1 == p;
        if ((part[2] != 0) != first || (part[3] != 0) != last)
          throw invalid_option_error(which + ": the embedding belongs to the first chunk, the head to the last");
        std::pair<std::size_t, std::size_t> const range{static_cast<std::size_t>(part[0]),
                                                        static_cast<std::size_t>(part[1])};
        auto& slot = layers[c * p + st];
        if (slot && *slot != range)
          throw invalid_option_error(which + " holds other layers than another replica of its stage");
        slot = range;
      }
    }
    std::size_t next = 0;
    for (std::size_t k = 0; k < layers.size(); ++k) {
      auto const [first, last] = *layers[k];
      std::string const which = "pipeline: chunk " + std::to_string(k / p) + " of stage " + std::to_string(k % p);
      if (first >= last) throw invalid_option_error(which + " has no layers");
      if (first != next)
        throw invalid_option_error(which + " starts at layer " + std::to_string(first) + ", not " +
                                   std::to_string(next) + " (every layer exactly once, in order)");
      next = last;
    }
    if (std::size_t const total = chunks_.front()->block_count(); next != total)
      throw invalid_option_error("pipeline: the chunks end at layer " + std::to_string(next) + " of " +
                                 std::to_string(total));
  }

  template <class P>
  void adopt(P& p, std::size_t stage, exec_type const& exec) {
    bound_layout const compute = p.compute_layout();
    if (auto const problem = state_sharding_error(stage_mesh_.shape(), compute, dp_); !problem.empty())
      throw invalid_layout_error(p.name() + ": " + std::string(problem.view()));
    using concrete = detail::trainable_parameter<typename P::tensor::value_type, P::tensor::rank, memory_space>;
    if constexpr (P::has_master) p.keep_grad_in_value_type(options_.gradient_type != precision::fp32);
    bool const decays = options_.decays ? options_.decays(p.name(), P::tensor::rank) : P::tensor::rank >= 2;
    parameters_.push_back(
        std::make_unique<concrete>(p, stage, decays, state_layouts_for(compute, options_.stage, dp_), exec));
  }

  [[nodiscard]] bool data_parallel() const { return dp_ != npos && stage_mesh_.shape()[dp_].extent > 1; }

  // Buckets in the order backward completes gradients: stages last to
  // first, parameters last to first within a stage; with ZeRO-3, a bucket
  // per stage (the unit it gathers), else about bucket_bytes each. With
  // ZeRO-1 and 2, each bucket's gather of updated values.
  void make_buckets() {
    if (!data_parallel()) return;
    bool const per_stage = options_.stage == zero_stage::parameters;
    std::vector<member*> open;
    std::size_t bytes = 0;
    for (std::size_t i = parameters_.size(); i-- > 0;) {
      member* m = parameters_[i].get();
      open.push_back(m);
      bool const narrow = options_.gradient_type != precision::fp32;
      bytes += m->rows() * m->row_elements() * (narrow ? sizeof(value_type) : sizeof(accumulation_t<value_type>));
      bool const full =
          per_stage ? i == 0 || parameters_[i - 1]->stage() != m->stage() : bytes >= options_.bucket_bytes;
      if (full || i == 0) {
        // 1 to 32767 (MPI's least upper bound for tags); 0 is other exchanges'. Buckets
        // 32766 apart never overlap in time.
        int const tag = static_cast<int>(buckets_.size() % 32766) + 1;
        buckets_.push_back(std::make_unique<bucket>(std::move(open), dp_, tag, options_.gradient_reduction));
        if (fused_update())
          update_gathers_.push_back(
              std::make_unique<gather>(stage_mesh_, buckets_.back()->group(), buckets_.back()->parts()));
        open.clear();
        bytes = 0;
      }
    }
  }

  // ZeRO-1 and 2 on more than one data-parallel rank: updates by rows, values completed by each bucket's gather.
  [[nodiscard]] bool fused_update() const {
    return data_parallel() &&
           (options_.stage == zero_stage::optimizer_state || options_.stage == zero_stage::gradients);
  }

  // ZeRO-3: a unit per model stage with parameters, its members' rows over the dp group.
  void make_units() {
    if (options_.stage != zero_stage::parameters || dp_ == npos) return;
    communicator const& group = stage_mesh_.group(axis_set::of(dp_));
    for (auto& p : parameters_) units_[p->stage()].members.push_back(p.get());
    for (auto& [stage, unit] : units_) {
      std::vector<std::pair<std::size_t, std::size_t>> rows;
      for (member* m : unit.members) rows.emplace_back(m->rows(), m->row_elements());
      unit.fused = std::make_unique<gather>(stage_mesh_, group,
                                            detail::dp_parts(std::move(rows), static_cast<std::size_t>(group.size())));
    }
  }

  // Starts gathering stage s's parameters (nothing if it has none, or they are gathered or on their way).
  void start_gather(std::size_t s) {
    auto const it = units_.find(s);
    if (it == units_.end() || it->second.gathered || it->second.fused->started()) return;
    std::vector<flat_view> sources, targets;
    for (member* m : it->second.members) {
      sources.push_back(m->stored_block());
      targets.push_back(m->gather_into());
    }
    it->second.fused->start(sources, std::move(targets), side_, exec_);
  }

  // Stage s's parameters gathered, waiting for their gather if it is on its way.
  void finish_gather(std::size_t s) {
    start_gather(s);
    auto const it = units_.find(s);
    if (it == units_.end() || it->second.gathered) return;
    it->second.fused->finish(side_);
    for (member* m : it->second.members) m->gathered_in();
    it->second.gathered = true;
  }

  // Frees stage s's gathered parameters (a gather still on its way completes first).
  void release(std::size_t s) {
    auto const it = units_.find(s);
    if (it == units_.end()) return;
    if (it->second.fused->started()) it->second.fused->finish(side_);
    for (member* m : it->second.members) m->release();
    it->second.gathered = false;
  }

  // The optimizer's step on every parameter. ZeRO-1 and 2: a bucket's
  // members updated on this rank's rows, then gathered while the next
  // bucket updates.
  void update(double lr_factor, double scale, exec_type const& exec) {
    auto const rule = [&](member const& m) { return options_.method.adjusted(lr_factor, m.decays()); };
    if (!fused_update()) {
      for (auto& p : parameters_) {
        p->update(rule(*p), steps_, scale, exec);
        p->zero_grad();
      }
      return;
    }
    gather* gathering = nullptr;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      auto const& members = buckets_[b]->members();
      auto const me = static_cast<std::size_t>(buckets_[b]->group().rank());
      std::vector<flat_view> sources, targets;
      for (std::size_t i = 0; i < members.size(); ++i) {
        auto const rows = buckets_[b]->parts().part(i, me);
        targets.push_back(members[i]->update_rows(rule(*members[i]), steps_, scale, rows, exec));
        sources.push_back(Kokkos::subview(targets.back(), rows));
        members[i]->zero_grad();
      }
      if (gathering != nullptr) gathering->finish(side_);
      gathering = update_gathers_[b].get();
      gathering->start(sources, std::move(targets), side_, exec);
    }
    if (gathering != nullptr) gathering->finish(side_);
  }

  // The schedule for m micro-batches, made and checked once per m.
  void prepare_schedule(std::size_t m) {
    if (schedule_.micro_batches == m && !schedule_.actions.empty()) return;
    schedule_ = make_schedule(options_.schedule, stages(), m, chunks_.size());
    if (pipeline_simulation const check = simulate(schedule_); !check.ok())
      throw invalid_option_error(std::string(check.error.view()));
    auto const& list = schedule_.actions[stage()];
    // The action after which each chunk's gradients are complete: buckets may start then.
    last_gradient_.assign(chunks_.size(), 0);
    for (std::size_t k = 0; k < list.size(); ++k)
      if (list[k].op == pipeline_op::backward || list[k].op == pipeline_op::backward_weight)
        last_gradient_[list[k].chunk] = k;
  }

  // Runs this stage's actions of the schedule; the loss goes to scalars_.
  void run_schedule(std::span<micro_batch const> batch, double tokens, memory_phases& phases, exec_type const& exec) {
    std::size_t const v = chunks_.size(), V = stages() * v, s = stage();
    std::vector<in_flight> state(batch.size() * v);
    auto const at = [&](pipeline_action const& a) -> in_flight& { return state[a.micro * v + a.chunk]; };
    communicator const& pp = pp_ == npos ? mesh_.comm() : mesh_.group(axis_set::of(pp_));
    detail::stage_transfers<activation> transfers(
        pp, schedule_, s, [&](pipeline_action const& a) { return chunks_[a.chunk]->make_boundary(batch[a.micro].ids); },
        exec);
    transfers_ = &transfers;
    timeline_.clear();
    if (options_.timeline) barrier(mesh_.comm());
    auto const start = clock::now();
    auto const seconds = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
    auto const& list = schedule_.actions[s];
    for (std::size_t k = 0; k < list.size(); ++k) {
      pipeline_action const& a = list[k];
      Model& chunk = *chunks_[a.chunk];
      std::size_t const vs = schedule_.virtual_stage(s, a.chunk);
      in_flight& f = at(a);
      double const began = seconds();
      if (reads_parameters(a.op)) {
        last_unit_ = stage_reached(a.op, chunk_stages_[a.chunk], false);
        next_unit_ = npos;
        for (std::size_t j = k + 1; j < list.size() && next_unit_ == npos; ++j)
          if (reads_parameters(list[j].op)) next_unit_ = stage_reached(list[j].op, chunk_stages_[list[j].chunk], true);
      }
      switch (a.op) {
        case pipeline_op::receive_activation: f.input = transfers.receive(a); break;
        case pipeline_op::receive_gradient: f.gradient_in = transfers.receive(a); break;
        case pipeline_op::send_activation: transfers.send(a, std::exchange(f.output, {})); break;
        case pipeline_op::send_gradient: transfers.send(a, std::exchange(f.gradient_out, {})); break;
        case pipeline_op::forward: {
          phases.begin();
          auto out = chunk.forward_chunk(&batch[a.micro].ids, std::exchange(f.input, {}), &batch[a.micro].targets,
                                         tokens, exec);
          if (out.loss && stage_mesh_.comm().rank() == 0) scalars_.add_loss(*out.loss, exec);
          if (vs + 1 < V) f.output = boundary(chunk, std::move(out.y), exec);
          out.y = {};
          f.saved = chunk.take_saved();
          count_kept(state);
          phases.end(0);
          break;
        }
        case pipeline_op::backward:
        case pipeline_op::backward_input: {
          phases.begin();
          bool const split = a.op == pipeline_op::backward_input;
          gradients_complete_ = !split && k == last_gradient_[a.chunk];
          if (split) stage_mesh_.state<weight_gradient_deferral>().into(&f.weights);
          chunk.restore_saved(std::exchange(f.saved, {}));
          count_kept(state);
          activation d = chunk.backward_chunk(std::exchange(f.gradient_in, {}), exec);
          stage_mesh_.state<weight_gradient_deferral>().into(nullptr);
          gradients_complete_ = false;
          if (vs > 0) f.gradient_out = boundary(chunk, std::move(d), exec);
          phases.end(1);
          break;
        }
        case pipeline_op::backward_weight:
          phases.begin();
          run_weight_gradients(f.weights);
          if (k == last_gradient_[a.chunk])  // the chunk's gradients are complete
            for (std::size_t st : chunk_stages_[a.chunk]) start_buckets_ready_at(st);
          phases.end(1);
          break;
      }
      if (options_.timeline && is_compute(a.op)) timeline_.push_back({a, began, seconds()});
      advance();
    }
    last_unit_ = next_unit_ = npos;
    transfers.finish();
    transfers_ = nullptr;
  }

  // The ledger counts what the stage keeps for the backward of the
  // micro-batches in flight as activations, the pool's other results as
  // workspace: called whenever what it keeps changes.
  void count_kept(std::span<in_flight const> state) const {
    std::vector<void const*> kept;
    for (in_flight const& f : state) kept.insert(kept.end(), f.saved.data.begin(), f.saved.data.end());
    stage_mesh_.state<ops::detail::result_pools>().classify(std::move(kept));
  }

  // x in the layout that crosses stage boundaries (where a chunk's output or input gradient already is).
  static activation boundary(Model const& chunk, activation x, exec_type const& exec) {
    return ops::detail::to_layout(x, chunk.boundary_layout(), exec);
  }

  // ZeRO-3 prefetches: the next stage's unit in the pass's order and, at
  // an action's last unit, the first unit of the next action that reads
  // parameters (across chunks: another chunk's, or the other direction).
  void on_stage(stage_event const& e) {
    bool const forward_pass = e.phase == forward_phase;
    if (e.before) {
      finish_gather(e.stage);
      if (forward_pass || e.stage > 0) start_gather(forward_pass ? e.stage + 1 : e.stage - 1);
      if (e.stage == last_unit_) start_gather(next_unit_);
    } else {
      release(e.stage);
    }
    if (!e.before && !forward_pass && gradients_complete_) start_buckets_ready_at(e.stage);
    advance();
    if (user_trace_) user_trace_(e);
  }

  void start_buckets_ready_at(std::size_t stage) {
    if (!options_.overlap) return;
    for (auto& b : buckets_)
      if (!b->started() && b->ready_stage() == stage) b->start(exec_);
  }

  // Advances every reduction, gather and transfer in flight without blocking.
  void advance() {
    for (auto& b : buckets_) b->progress();
    for (auto& [stage, unit] : units_) unit.fused->progress();
    if (transfers_) transfers_->progress();
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

  std::vector<Model*> chunks_;
  device_mesh mesh_, stage_mesh_;
  training_options options_;
  std::size_t pp_, dp_;
  std::vector<std::unique_ptr<member>> parameters_;      // in forward order
  std::vector<std::unique_ptr<bucket>> buckets_;         // in backward order
  std::vector<std::unique_ptr<gather>> update_gathers_;  // ZeRO-1 and 2: per bucket
  std::map<std::size_t, stage_unit> units_;              // ZeRO-3: per model stage
  trace_hook user_trace_;
  exec_type exec_;
  exec_type side_;  // the gathers' copies
  pipeline_schedule schedule_;
  std::size_t last_unit_ = npos, next_unit_ = npos;     // the running action's last unit, the next action's first
  std::vector<std::vector<std::size_t>> chunk_stages_;  // per chunk, the model stages it holds parameters of
  std::vector<std::size_t> last_gradient_;              // per chunk, the index of its last B or W in this stage's list
  bool gradients_complete_ = false;                     // in the backward that completes a chunk's gradients
  detail::stage_transfers<activation>* transfers_ = nullptr;
  std::vector<timed_action> timeline_;
  detail::step_scalars<memory_space> scalars_;
  std::size_t steps_ = 0;
  double loss_scale_ = options_.scaling.initial;
  std::size_t good_steps_ = 0;  // steps since the loss scale last changed or a step was skipped
  memory_report memory_;
};

}  // namespace shardmesh::parallel
