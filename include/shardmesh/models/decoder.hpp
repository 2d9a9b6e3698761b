#pragma once
// A decoder-only transformer assembled from tensor-parallel layers: token
// embeddings (vocabulary-parallel, with learned positions or none), blocks
// (nn/decoder_block.hpp), a final norm and a vocabulary-parallel head whose
// logits stay sharded into the cross-entropy. Explicit forward and
// backward; every collective comes from the layers' layouts
// (transformer_layouts.hpp), with or without sequence parallelism.
//
// An Architecture says what it is made of (gpt.hpp, llama.hpp): its config
// (sizes, with `layers` and `sequence_parallel`), its stages' names and
// declared parameters (its description), and how to make its embedding,
// its blocks and its norms from those declarations:
//
//   struct my_architecture {
//     using config = my_config;
//     static std::string config_error(config const&);  // what is wrong, naming the field, or empty
//     template <class T, class M> using block = decoder_block<T, M, my_mlp<T, M>>;
//     static std::string stage_name(config const&, std::size_t stage);
//     static std::vector<parameter_spec> stage_parameters(config const&, mesh_shape const&, std::size_t stage);
//     template <class T, class M> static embedding<T, M> make_embedding(declared_parameters<T, M> const&,
//                                                                       transformer_layouts const&);
//     template <class T, class M> static block<T, M> make_block(declared_parameters<T, M> const&, config const&,
//                                                               transformer_layouts const&, std::string prefix);
//     template <class T, class M> static layer_norm<T, 3, M> make_norm(declared_parameters<T, M> const&,
//                                                                       config const&, std::string name);
//   };
//
//   decoder<my_architecture, float> model(mesh, config, [&](std::string const& name) { return values[name]; });
//   // or made shard by shard on the device (nn/initializer.hpp):
//   decoder<my_architecture, float> model(mesh, config, [](parameter_spec const& p) { return initializer{...}; });
//   auto f = model.forward(ids, targets);   // loss, logits
//   model.backward();                        // gradients in each parameter
//
// A pipeline chunk holds a part of the model (model_part: a run of blocks,
// with the embedding if it comes first, the head and loss if it comes
// last) and runs forward_chunk / backward_chunk on what its neighbours
// send (train/model_contract.hpp).

#include "shardmesh/errors.hpp"
#include "shardmesh/nn/declared_parameters.hpp"
#include "shardmesh/nn/embedding.hpp"
#include "shardmesh/nn/layer_norm.hpp"
#include "shardmesh/nn/linear.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/nn/saved_activations.hpp"
#include "shardmesh/nn/stage_trace.hpp"
#include "shardmesh/ops/cross_entropy.hpp"
#include "shardmesh/ops/layer_support.hpp"
#include "shardmesh/strategy/layer_partition.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"
#include "shardmesh/tensor/device_scalar.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

template <class Architecture, class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class decoder {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using ids_tensor = dynamic_dtensor<int, 2, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  using value_type = T;
  using memory_space = MemorySpace;
  using config_type = typename Architecture::config;

  struct forward_result {
    accumulation_t<T> loss;
    activation logits;  // [b, t, v], sharded on the vocabulary
  };

  // The whole model, or the part a pipeline chunk holds. Parameters are
  // named and stages numbered as in the whole model.
  decoder(device_mesh const& mesh, config_type const& config, parameter_values const& values, model_part part = {})
      : mesh_(mesh), config_(checked(config)), layouts_(mesh.shape(), config.sequence_parallel), part_(part) {
    auto const& c = config;
    part_.last = std::min(part_.last, c.layers);
    auto const declared = [&](std::size_t stage) {
      return declared_parameters<T, MemorySpace>(mesh, Architecture::stage_parameters(c, mesh.shape(), stage), values);
    };
    if (part_.embedding)
      embedding_.emplace(Architecture::template make_embedding<T, MemorySpace>(declared(0), layouts_));
    for (std::size_t l = part_.first; l < part_.last; ++l)
      blocks_.push_back(Architecture::template make_block<T, MemorySpace>(declared(l + 1), c, layouts_,
                                                                          "h" + std::to_string(l) + "."));
    if (part_.head) {
      auto const p = declared(c.layers + 1);
      final_norm_ = Architecture::template make_norm<T, MemorySpace>(p, c, "lnf");
      head_ = head_type(p.template take<2>("whead"), layouts_.whole_rows, layouts_.features);
    }
  }

  // The stages of the whole model, in forward order, numbered and named as
  // the architecture's description declares them (0 the embedding, 1 to L
  // the blocks, L + 1 the final norm and head, L + 2 the loss). A part runs
  // and holds the parameters of some of them.
  [[nodiscard]] std::size_t stage_count() const { return config_.layers + 3; }
  [[nodiscard]] std::size_t block_count() const { return config_.layers; }
  [[nodiscard]] std::string stage_name(std::size_t s) const { return Architecture::stage_name(config_, s); }
  [[nodiscard]] model_part const& part() const { return part_; }
  // A new, uninitialised tensor of what crosses a chunk boundary for a
  // micro-batch of these ids: the activation, or its gradient, [batch,
  // sequence, hidden] in the activation layout (not collective).
  [[nodiscard]] activation make_boundary(ids_tensor const& ids) const {
    return ops::make_result<T, 3, MemorySpace>(mesh_, boundary_layout(),
                                               {ids.global_extents()[0], ids.global_extents()[1], config_.hidden});
  }
  [[nodiscard]] bound_layout boundary_layout() const { return bind(mesh_.shape(), layouts_.activation); }
  [[nodiscard]] device_mesh const& mesh() const { return mesh_; }

  // Called before and after each stage of forward and backward (stage_trace.hpp).
  void trace(trace_hook hook) { trace_.set(std::move(hook)); }

  [[nodiscard]] transformer_layouts const& layouts() const { return layouts_; }
  [[nodiscard]] config_type const& config() const { return config_; }

  // ids and targets [batch, sequence]; count: the number of target tokens the
  // loss averages over (0: all of them).
  forward_result forward(ids_tensor const& ids, ids_tensor const& targets, double count = 0,
                         exec_type const& exec = {}) {
    chunk_output out = forward_chunk(&ids, {}, &targets, count, exec);
    return {*out.loss, std::move(out.y)};
  }

  // The last forward's auxiliary losses (a mixture of experts' load-balancing
  // and z-losses, weighted by their options) summed over this part's blocks:
  // the objective is the loss plus these, each micro-batch's weighted by
  // its share of the step's tokens. The same on every rank of the part.
  [[nodiscard]] double auxiliary_loss() const {
    double sum = 0;
    for (block const& b : blocks_)
      if constexpr (requires { b.auxiliary_loss(); }) sum += b.auxiliary_loss();
    return sum;
  }

  // Gradients of the last forward's loss, accumulated into every parameter.
  void backward(exec_type const& exec = {}) { backward_chunk({}, exec); }

  // A part's forward: from the ids (a part with the embedding) or x (the
  // previous part's output) to the loss and logits (a part with the head)
  // or its output.
  struct chunk_output {
    std::optional<device_scalar<accumulation_t<T>, MemorySpace>> loss;  // read by the host only when asked
    activation y;                                                       // the logits, or the output
  };
  chunk_output forward_chunk(ids_tensor const* ids, activation x, ids_tensor const* targets, double count,
                             exec_type const& exec = {}) {
    if (part_.embedding) x = staged(0, forward_phase, [&] { return embedding_->forward(*ids, exec); });
    // Auxiliary losses (experts') enter the objective by this micro-batch's share of the averaged tokens.
    double const share = count > 0 ? static_cast<double>(x.global_extents()[0] * x.global_extents()[1]) / count : 1.0;
    for (std::size_t l = 0; l < blocks_.size(); ++l)
      x = staged(part_.first + l + 1, forward_phase, [&] { return block_forward(blocks_[l], x, exec, share); });
    if (!part_.head) return {std::nullopt, std::move(x)};
    std::size_t const last = config_.layers + 1;
    activation logits = staged(last, forward_phase, [&] { return head_.forward(final_norm_.forward(x, exec), exec); });
    staged(last + 1, forward_phase, [&] { loss_.emplace(ops::cross_entropy(logits, *targets, count, exec)); });
    return {loss_->loss, std::move(logits)};
  }

  // A part's backward: from the gradient of its output dy (ignored by a part
  // with the head, which starts from its loss) to the gradient of its input
  // (empty for a part with the embedding); parameter gradients accumulated.
  activation backward_chunk(activation dy, exec_type const& exec = {}) {
    if (part_.head) {
      std::size_t const last = config_.layers + 1;
      activation const dlogits = staged(last + 1, backward_phase, [&] {
        activation g = ops::cross_entropy_backward(*loss_, 1, exec);
        loss_.reset();
        return g;
      });
      dy = staged(last, backward_phase, [&] {
        return final_norm_.backward(
            ops::to_layout(head_.backward(dlogits, exec), bind(mesh_.shape(), layouts_.activation), exec), exec);
      });
    }
    for (std::size_t l = blocks_.size(); l-- > 0;)
      dy = staged(part_.first + l + 1, backward_phase, [&] { return blocks_[l].backward(dy, exec); });
    if (!part_.embedding) return dy;
    staged(0, backward_phase, [&] { embedding_->backward(dy, exec); });
    return {};
  }

  // What the last forward saved for its backward, taken out of the layers,
  // and put back (saved_activations.hpp).
  saved_activations take_saved() {
    return take_saved_of([&](auto&& visit) { visit_saved(visit); });
  }
  void restore_saved(saved_activations saved) {
    restore_saved_into([&](auto&& visit) { visit_saved(visit); }, std::move(saved));
  }

  // visit(name, parameter) for every parameter, in the reference's order.
  template <class Visit>
  void for_each_parameter(Visit&& visit) {
    for (std::size_t s = 0; s < stage_count(); ++s) for_each_parameter_of(s, visit);
  }
  // visit(name, parameter) for the parameters of stage s this part holds.
  template <class Visit>
  void for_each_parameter_of(std::size_t s, Visit&& visit) {
    if (s == 0 && part_.embedding) {
      embedding_->for_each_parameter(visit);
    } else if (s > part_.first && s <= part_.last) {
      blocks_[s - 1 - part_.first].for_each_parameter("h" + std::to_string(s - 1) + ".", visit);
    } else if (s == config_.layers + 1 && part_.head) {
      final_norm_.for_each_parameter("lnf", visit);
      visit(std::string("whead"), head_.w());
    }
  }

  void zero_grad() {
    for_each_parameter([](std::string const&, auto& p) { p.zero_grad(); });
  }

 private:
  using head_type = linear<"btc,cv->btv", T, MemorySpace>;
  using block = typename Architecture::template block<T, MemorySpace>;

  template <class Visit>
  void visit_saved(Visit&& visit) {
    if (embedding_) embedding_->visit_saved(visit);
    for (block& b : blocks_) b.visit_saved(visit);
    final_norm_.visit_saved(visit);
    head_.visit_saved(visit);
    visit(loss_);
  }

  // A block's forward, given the auxiliary losses' weight where it takes one.
  static activation block_forward(block& b, activation const& x, exec_type const& exec, double auxiliary_weight) {
    if constexpr (requires { b.forward(x, exec, auxiliary_weight); })
      return b.forward(x, exec, auxiliary_weight);
    else
      return b.forward(x, exec);
  }

  // c, or the architecture's complaint about it (the same on every rank, before any work).
  static config_type const& checked(config_type const& c) {
    std::string const why = Architecture::config_error(c);
    if (!why.empty()) throw invalid_option_error("model: " + why);
    return c;
  }

  // run()'s result, with the trace hook called before and after it.
  template <class Run>
  auto staged(std::size_t s, std::string_view phase, Run&& run) {
    return trace_.staged(s, [&] { return stage_name(s); }, phase, std::forward<Run>(run));
  }

  device_mesh mesh_;
  config_type config_;
  stage_tracer trace_;
  transformer_layouts layouts_;
  model_part part_;
  std::optional<embedding<T, MemorySpace>> embedding_;
  std::vector<block> blocks_;
  layer_norm<T, 3, MemorySpace> final_norm_;
  head_type head_;
  std::optional<ops::cross_entropy_result<T, 3, MemorySpace>> loss_;
};

}  // namespace shardmesh::parallel
