#pragma once
// Training any model of the contract over a dp x (cp or ep) x pp x tp mesh of the
// world's ranks, as the model tests do: the setups of the world (every
// ZeRO stage and schedule that fits), and a run of some steps returning
// every step's loss and gradient norm and the parameters this rank's stage
// holds (gathered, as double).

#include "exhaustive.hpp"
#include "mpi_test.hpp"
#include "sequence_order.hpp"
#include "training_reference.hpp"

#include <shardmesh/shardmesh.hpp>
#include <shardmesh/strategy/batch.hpp>
#include <shardmesh/strategy/layer_partition.hpp>
#include <shardmesh/train/trainer.hpp>

#include <array>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace shardmesh::test::training {

struct run_options {
  std::size_t steps = training::steps;
  parallel::optimizer method = parallel::adamw{};
  parallel::learning_rate_schedule lr_schedule = {};
  double clip_norm = clip;
  parallel::loss_scaling scaling = {};
  parallel::precision gradient_type = parallel::precision::fp32;
  parallel::precision gradient_reduction = parallel::precision::fp32;
};

// The training runs of the world's ranks: pp 1 with every ZeRO stage, pp 2 with every schedule (each with
// another ZeRO stage), tp 1 and 2 where the ranks divide; 2 micro-batches.
inline std::vector<pipeline_setup> setups_of_world() {
  using parallel::schedule_kind;
  using parallel::zero_stage;
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<pipeline_setup> out;
  constexpr std::array stages{zero_stage::none, zero_stage::optimizer_state, zero_stage::gradients,
                              zero_stage::parameters};
  for (std::size_t pp : {1, 2})
    for (std::size_t tp : {1, 2}) {
      if (n % (pp * tp) != 0) continue;
      std::size_t const dp = n / (pp * tp);
      if (pp == 1) {
        for (zero_stage stage : stages) out.push_back({dp, 1, tp, schedule_kind::one_f_one_b, 1, stage, 2, {}});
        continue;
      }
      std::size_t k = 0;
      for (schedule_kind kind :
           {schedule_kind::gpipe, schedule_kind::one_f_one_b, schedule_kind::interleaved, schedule_kind::zero_bubble})
        out.push_back({dp, pp, tp, kind, kind == schedule_kind::interleaved ? 2U : 1U, stages[k++ % 4], 2, {}});
    }
  return out;
}

// The setups a long test runs: every one on up to 2 ranks; beyond, every 3rd (which still visits every ZeRO stage,
// schedule and mesh) in the default suite, every one in the full suite (exhaustive.hpp).
inline std::vector<pipeline_setup> sampled_setups_of_world() {
  std::vector<pipeline_setup> const every = setups_of_world();
  std::size_t const stride = test::world_size() > 2 ? case_stride(3) : 1;
  std::vector<pipeline_setup> out;
  for (std::size_t i = 0; i < every.size(); i += stride) out.push_back(every[i]);
  return out;
}

// A Model of `config` over the setup's mesh, from `start`, and its trainer.
template <class Model>
class model_run {
 public:
  using trainer_type = parallel::trainer<Model>;

  model_run(pipeline_setup const& su, typename Model::config_type const& config, values const& start,
            std::size_t samples, run_options const& o)
      : setup_(su),
        config_(config),
        mesh_(MPI_COMM_WORLD, shape_of(su)),
        stage_(mesh_.submesh(axis_set::all(mesh_.shape().ndim) - axis_set::of(mesh_.shape().find("pp")))),
        accounting_(parallel::batch_accounting::uneven(samples, su.micro_batches, su.dp)) {
    // MPI's reduce-scatter, whatever this machine would measure faster: two runs sum in the same order.
    stage_.state<collective_tuning>().prefer(reduce_scatter_algorithm::mpi);
    std::size_t const s = mesh_.coordinates()[mesh_.shape().find("pp")];
    auto const parts = parallel::partition_layers(config.layers, su.pp * su.chunks);
    std::vector<Model*> pointers;
    for (std::size_t k = 0; k < su.chunks; ++k) {
      chunks_.emplace_back(
          stage_, config, [&](std::string const& name) { return start.at(name); }, parts[k * su.pp + s]);
      pointers.push_back(&chunks_.back());
    }
    trainer_.emplace(pointers, mesh_,
                     parallel::training_options{.stage = su.stage,
                                                .method = o.method,
                                                .lr_schedule = o.lr_schedule,
                                                .clip_norm = o.clip_norm,
                                                .bucket_bytes = 512,
                                                .schedule = su.schedule,
                                                .scaling = o.scaling,
                                                .gradient_type = o.gradient_type,
                                                .gradient_reduction = o.gradient_reduction});
  }

  [[nodiscard]] trainer_type& trainer() { return *trainer_; }
  [[nodiscard]] device_mesh const& mesh() const { return mesh_; }
  [[nodiscard]] std::deque<Model>& chunks() { return chunks_; }

  // One step on the batch's samples, split into the setup's micro-batches.
  typename trainer_type::step_result step(batch const& b) {
    std::vector<typename trainer_type::micro_batch> micro;
    for (std::size_t a = 0; a < setup_.micro_batches; ++a) {
      interval const part = accounting_.micro_step(a);
      layout const& l = chunks_.front().layouts().ids;
      using memory = typename Model::memory_space;
      micro.push_back({rows<memory>(stage_, l, stored(b.tokens), part, config_.sequence),
                       rows<memory>(stage_, l, stored(b.targets), part, config_.sequence)});
    }
    return trainer_->step(micro);
  }

  // `count` steps, batch_of(step) giving each one's samples: every step's loss and norm, and the parameters after.
  history run_steps(std::function<batch(std::size_t)> const& batch_of, std::size_t count) {
    history h;
    for (std::size_t step = 0; step < count; ++step) {
      auto const r = this->step(batch_of(step));
      h.losses.push_back(r.loss);
      h.norms.push_back(r.grad_norm);
    }
    h.parameters = parameters();
    return h;
  }

  // The parameters this rank's stage holds, gathered, as double.
  [[nodiscard]] values parameters() {
    values out;
    for (Model& chunk : chunks_)
      chunk.for_each_parameter([&](std::string const& name, auto& p) {
        auto const g = gather(p.stored());
        for (std::size_t i = 0; i < g.size(); ++i) out[name].push_back(static_cast<double>(g.data()[i]));
      });
    return out;
  }

 private:
  // dp, then cp and ep where the setup has them, pp, tp.
  static mesh_shape shape_of(pipeline_setup const& su) {
    if (su.ep > 0) return mesh_shape{{"dp", su.dp}, {"ep", su.ep}, {"pp", su.pp}, {"tp", su.tp}};
    if (su.cp > 1) return mesh_shape{{"dp", su.dp}, {"cp", su.cp}, {"pp", su.pp}, {"tp", su.tp}};
    return mesh_shape{{"dp", su.dp}, {"pp", su.pp}, {"tp", su.tp}};
  }

  // The samples' tokens in the order a context-parallel model stores them (sequence_order.hpp).
  [[nodiscard]] std::vector<int> stored(std::vector<int> const& tokens) const {
    if (setup_.cp == 1) return tokens;
    return reordered(tokens, tokens.size() / config_.sequence, config_.sequence, setup_.cp, sequence_order::balanced,
                     true);
  }

  pipeline_setup setup_;
  typename Model::config_type config_;
  device_mesh mesh_, stage_;
  parallel::batch_accounting accounting_;
  std::deque<Model> chunks_;  // the trainer keeps pointers to them
  std::optional<trainer_type> trainer_;
};

// The parameters this rank's stage holds after o.steps steps of a Model of `config`, and every step's loss and
// norm; batch_of(step) gives a step's `samples` sequences.
template <class Model>
history train(pipeline_setup const& su, typename Model::config_type const& config, values const& start,
              std::size_t samples, std::function<batch(std::size_t)> const& batch_of, run_options const& o) {
  model_run<Model> run(su, config, start, samples, o);
  return run.run_steps(batch_of, o.steps);
}

}  // namespace shardmesh::test::training
