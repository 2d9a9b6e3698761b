#pragma once
// A small GPT assembled from tensor-parallel layers: token and position
// embeddings (vocabulary-parallel), blocks of layer norm, causal
// self-attention, residual, layer norm, MLP, residual, then a final layer
// norm and a vocabulary-parallel head whose logits stay sharded into the
// cross-entropy. Explicit forward and backward; every collective comes from
// the layers' layouts (transformer_layouts.hpp), with or without sequence parallelism.
//
//   gpt<float> model(mesh, config, [&](std::string const& name) { return values[name]; });
//   auto f = model.forward(ids, targets);   // loss, logits
//   model.backward();                        // gradients in each parameter
//
// A pipeline chunk holds a part of the model (model_part: a run of blocks,
// with the embedding if it comes first, the head and loss if it comes
// last) and runs forward_chunk / backward_chunk on what its neighbours send.

#include "shardmesh/errors.hpp"
#include "shardmesh/models/gpt_description.hpp"
#include "shardmesh/nn/attention.hpp"
#include "shardmesh/nn/declared_parameters.hpp"
#include "shardmesh/nn/embedding.hpp"
#include "shardmesh/nn/layer_norm.hpp"
#include "shardmesh/nn/linear.hpp"
#include "shardmesh/nn/mlp.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/nn/saved_activations.hpp"
#include "shardmesh/nn/stage_trace.hpp"
#include "shardmesh/ops/cross_entropy.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/elementwise.hpp"
#include "shardmesh/strategy/layer_partition.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

template <class T, class MemorySpace>
layer_norm<T, 3, MemorySpace> make_layer_norm(declared_parameters<T, MemorySpace> const& declared, gpt_config const& c,
                                              std::string const& name) {
  return {declared.template take<1>(name + "_g"), declared.template take<1>(name + "_b"), static_cast<T>(c.eps)};
}

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class transformer_block {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  transformer_block(layer_norm<T, 3, MemorySpace> ln1, attention<T, MemorySpace> attn,
                    layer_norm<T, 3, MemorySpace> ln2, mlp<T, MemorySpace> feed, layout activation_layout)
      : ln1_(std::move(ln1)),
        attn_(std::move(attn)),
        ln2_(std::move(ln2)),
        mlp_(std::move(feed)),
        activation_(std::move(activation_layout)) {}

  // A block from its declared parameters, named prefix + "wq" etc. (gpt_description.hpp).
  static transformer_block make(declared_parameters<T, MemorySpace> const& declared, gpt_config const& c,
                                transformer_layouts const& layouts, std::string const& prefix) {
    using attn = attention<T, MemorySpace>;
    using feed = mlp<T, MemorySpace>;
    auto const projection = [&](std::string const& name) {
      return typename attn::projection(declared.template take<3>(prefix + name), layouts.whole_rows, layouts.heads);
    };
    attn a(projection("wq"), projection("wk"), projection("wv"),
           typename attn::output(declared.template take<3>(prefix + "wo"), layouts.heads, layouts.activation));
    feed f(typename feed::up(declared.template take<2>(prefix + "w1"), layouts.whole_rows, layouts.features),
           typename feed::down(declared.template take<2>(prefix + "w2"), layouts.features, layouts.activation));
    return {make_layer_norm(declared, c, prefix + "ln1"), std::move(a), make_layer_norm(declared, c, prefix + "ln2"),
            std::move(f), layouts.activation};
  }

  activation forward(activation const& x, exec_type const& exec = {}) {
    activation const mid = ops::add(x, attn_.forward(ln1_.forward(x, exec), exec), exec);
    return ops::add(mid, mlp_.forward(ln2_.forward(mid, exec), exec), exec);
  }

  activation backward(activation const& dy, exec_type const& exec = {}) {
    // Each residual's gradient is added inside the layer norm's backward pass.
    activation const d_mid = ln2_.backward(reduced(mlp_.backward(dy, exec), exec), dy, exec);
    return ln1_.backward(reduced(attn_.backward(d_mid, exec), exec), d_mid, exec);
  }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    ln1_.visit_saved(visit);
    attn_.visit_saved(visit);
    ln2_.visit_saved(visit);
    mlp_.visit_saved(visit);
  }

  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    visit(prefix + "ln1_g", ln1_.gamma());
    visit(prefix + "ln1_b", ln1_.beta());
    visit(prefix + "wq", attn_.q().w());
    visit(prefix + "wk", attn_.k().w());
    visit(prefix + "wv", attn_.v().w());
    visit(prefix + "wo", attn_.o().w());
    visit(prefix + "ln2_g", ln2_.gamma());
    visit(prefix + "ln2_b", ln2_.beta());
    visit(prefix + "w1", mlp_.fc().w());
    visit(prefix + "w2", mlp_.proj().w());
  }

 private:
  // A partial input gradient, reduced once into the activation layout
  // (all-reduce; reduce-scatter with sequence parallelism).
  activation reduced(activation const& d, exec_type const& exec) {
    return ops::detail::to_layout(d, bind(d.mesh().shape(), activation_), exec);
  }

  layer_norm<T, 3, MemorySpace> ln1_;
  attention<T, MemorySpace> attn_;
  layer_norm<T, 3, MemorySpace> ln2_;
  mlp<T, MemorySpace> mlp_;
  layout activation_;
};

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
class gpt {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using ids_tensor = dynamic_dtensor<int, 2, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  using value_type = T;
  using memory_space = MemorySpace;

  struct forward_result {
    T loss;
    activation logits;  // [b, t, v], sharded on the vocabulary
  };

  // The whole model, or the part a pipeline chunk holds. Parameters are
  // named and stages numbered as in the whole model.
  gpt(device_mesh const& mesh, gpt_config const& config, parameter_source const& values, model_part part = {})
      : mesh_(mesh), config_(config), layouts_(mesh.shape(), config.sequence_parallel), part_(part) {
    auto const& c = config;
    part_.last = std::min(part_.last, c.layers);
    auto const declared = [&](std::size_t stage) {
      return declared_parameters<T, MemorySpace>(mesh, gpt_stage_parameters(c, mesh.shape(), stage), values);
    };
    if (part_.embedding) {
      auto const p = declared(0);
      embedding_.emplace(p.template take<2>("wte"), p.template take<2>("wpe"), layouts_.activation);
    }
    for (std::size_t l = part_.first; l < part_.last; ++l)
      blocks_.push_back(block::make(declared(l + 1), c, layouts_, "h" + std::to_string(l) + "."));
    if (part_.head) {
      auto const p = declared(c.layers + 1);
      final_norm_ = make_layer_norm(p, c, "lnf");
      head_ = head_type(p.template take<2>("whead"), layouts_.whole_rows, layouts_.features);
    }
  }

  // The stages of the whole model, in forward order, numbered and named
  // as gpt_description.hpp declares them. A part runs and holds the
  // parameters of some of them.
  [[nodiscard]] std::size_t stage_count() const { return config_.layers + 3; }
  [[nodiscard]] std::size_t block_count() const { return config_.layers; }
  [[nodiscard]] std::string stage_name(std::size_t s) const { return gpt_stage_name(config_, s); }
  [[nodiscard]] model_part const& part() const { return part_; }
  // A new, uninitialised tensor of what crosses a chunk boundary for a
  // micro-batch of these ids: the activation, or its gradient, [batch,
  // sequence, hidden] in the activation layout (not collective).
  [[nodiscard]] activation make_boundary(ids_tensor const& ids) const {
    return ops::detail::make_like<T, 3, MemorySpace>(
        mesh_, boundary_layout(), {ids.global_extents()[0], ids.global_extents()[1], config_.hidden});
  }
  [[nodiscard]] bound_layout boundary_layout() const { return bind(mesh_.shape(), layouts_.activation); }
  [[nodiscard]] device_mesh const& mesh() const { return mesh_; }

  // Called before and after each stage of forward and backward (stage_trace.hpp).
  void trace(trace_hook hook) { trace_.set(std::move(hook)); }

  [[nodiscard]] transformer_layouts const& layouts() const { return layouts_; }
  [[nodiscard]] gpt_config const& config() const { return config_; }

  // ids and targets [batch, sequence]; count: the number of target tokens the
  // loss averages over (0: all of them).
  forward_result forward(ids_tensor const& ids, ids_tensor const& targets, double count = 0,
                         exec_type const& exec = {}) {
    chunk_output out = forward_chunk(&ids, {}, &targets, count, exec);
    return {*out.loss, std::move(out.y)};
  }

  // Gradients of the last forward's loss, accumulated into every parameter.
  void backward(exec_type const& exec = {}) { backward_chunk({}, exec); }

  // A part's forward: from the ids (a part with the embedding) or x (the
  // previous part's output) to the loss and logits (a part with the head)
  // or its output.
  struct chunk_output {
    std::optional<T> loss;
    activation y;  // the logits, or the output
  };
  chunk_output forward_chunk(ids_tensor const* ids, activation x, ids_tensor const* targets, double count,
                             exec_type const& exec = {}) {
    if (part_.embedding) x = staged(0, forward_phase, [&] { return embedding_->forward(*ids, exec); });
    for (std::size_t l = 0; l < blocks_.size(); ++l)
      x = staged(part_.first + l + 1, forward_phase, [&] { return blocks_[l].forward(x, exec); });
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
        activation g = ops::cross_entropy_backward(*loss_, T(1), exec);
        loss_.reset();
        return g;
      });
      dy = staged(last, backward_phase, [&] {
        return final_norm_.backward(
            ops::detail::to_layout(head_.backward(dlogits, exec), bind(mesh_.shape(), layouts_.activation), exec),
            exec);
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
      visit(std::string("wte"), embedding_->wte());
      visit(std::string("wpe"), embedding_->wpe());
    } else if (s > part_.first && s <= part_.last) {
      blocks_[s - 1 - part_.first].for_each_parameter("h" + std::to_string(s - 1) + ".", visit);
    } else if (s == config_.layers + 1 && part_.head) {
      visit(std::string("lnf_g"), final_norm_.gamma());
      visit(std::string("lnf_b"), final_norm_.beta());
      visit(std::string("whead"), head_.w());
    }
  }

  void zero_grad() {
    for_each_parameter([](std::string const&, auto& p) { p.zero_grad(); });
  }

 private:
  using head_type = linear<"btc,cv->btv", T, MemorySpace>;
  using block = transformer_block<T, MemorySpace>;

  template <class Visit>
  void visit_saved(Visit&& visit) {
    if (embedding_) embedding_->visit_saved(visit);
    for (block& b : blocks_) b.visit_saved(visit);
    final_norm_.visit_saved(visit);
    head_.visit_saved(visit);
    visit(loss_);
  }

  // run()'s result, with the trace hook called before and after it.
  template <class Run>
  auto staged(std::size_t s, std::string_view phase, Run&& run) {
    return trace_.staged(s, [&] { return stage_name(s); }, phase, std::forward<Run>(run));
  }

  device_mesh mesh_;
  gpt_config config_;
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
