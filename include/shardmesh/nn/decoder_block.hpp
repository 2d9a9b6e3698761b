#pragma once
// A pre-norm decoder block: x + attention(norm1(x)), then + feed(norm2(.)).
// The GPT's (layer norms, a GELU MLP) and the Llama's (RMS norms, a SwiGLU
// MLP, rotary and grouped-query attention) differ only in their parts. The
// attention's and the feed-forward's input gradients come back P(sum:tp)
// and are reduced once each into the activation layout (all-reduce;
// reduce-scatter with sequence parallelism); each residual's gradient is
// added inside the norm's backward pass.
//
// A feed-forward layer with auxiliary losses (a mixture of experts,
// nn/dense_or_experts.hpp) takes the weight they enter the objective with
// from forward, and reports them through auxiliary_loss().
//
// Recomputation (strategy/recomputation.hpp): selective tells the
// attention to recompute its core; full keeps only the block's input after
// forward and runs the forward again at the start of backward.

#include "shardmesh/nn/attention.hpp"
#include "shardmesh/nn/layer_norm.hpp"
#include "shardmesh/ops/elementwise.hpp"
#include "shardmesh/ops/layer_support.hpp"
#include "shardmesh/strategy/recomputation.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <string>
#include <utility>

namespace shardmesh::parallel {

template <class T, class MemorySpace, class Feed>
class decoder_block {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using norm = layer_norm<T, 3, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  decoder_block(norm norm1, attention<T, MemorySpace> attn, norm norm2, Feed feed, layout activation_layout,
                recompute_mode recompute = recompute_mode::none)
      : norm1_(std::move(norm1)),
        attn_(std::move(attn)),
        norm2_(std::move(norm2)),
        feed_(std::move(feed)),
        activation_(std::move(activation_layout)),
        recompute_(recompute) {
    attn_.recompute_core(recompute == recompute_mode::selective);
  }

  // auxiliary_weight: d objective / d the feed-forward's auxiliary losses, where it has some.
  activation forward(activation const& x, exec_type const& exec = {}, double auxiliary_weight = 1) {
    auxiliary_weight_ = auxiliary_weight;
    activation y = layers_forward(x, exec);
    if (recompute_ == recompute_mode::full) {
      visit_layers_saved([](auto& member) { member = {}; });
      input_ = x;
    }
    return y;
  }

  activation backward(activation const& dy, exec_type const& exec = {}) {
    if (recompute_ == recompute_mode::full) (void)layers_forward(std::exchange(input_, {}), exec);
    activation const d_mid = norm2_.backward(reduced(feed_.backward(dy, exec), exec), dy, exec);
    return norm1_.backward(reduced(attn_.backward(d_mid, exec), exec), d_mid, exec);
  }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    if (recompute_ == recompute_mode::full) {
      visit(input_);
      visit(auxiliary_weight_);
    } else {
      visit_layers_saved(visit);
    }
  }

  // The last forward's weighted auxiliary losses (0 without any).
  [[nodiscard]] double auxiliary_loss() const {
    if constexpr (requires { feed_.auxiliary_loss(); })
      return feed_.auxiliary_loss();
    else
      return 0;
  }

  // visit(name, parameter), named prefix + "ln1_g", "wq", ... in forward order.
  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    norm1_.for_each_parameter(prefix + "ln1", visit);
    attn_.for_each_parameter(prefix, visit);
    norm2_.for_each_parameter(prefix + "ln2", visit);
    feed_.for_each_parameter(prefix, visit);
  }

 private:
  activation reduced(activation const& d, exec_type const& exec) { return ops::to_layout(d, activation_, exec); }

  activation layers_forward(activation const& x, exec_type const& exec) {
    activation const mid = ops::add(x, attn_.forward(norm1_.forward(x, exec), exec), exec);
    return ops::add(mid, feed_forward(norm2_.forward(mid, exec), exec), exec);
  }
  activation feed_forward(activation const& x, exec_type const& exec) {
    if constexpr (requires { feed_.forward(x, exec, auxiliary_weight_); })
      return feed_.forward(x, exec, auxiliary_weight_);
    else
      return feed_.forward(x, exec);
  }

  template <class Visit>
  void visit_layers_saved(Visit&& visit) {
    norm1_.visit_saved(visit);
    attn_.visit_saved(visit);
    norm2_.visit_saved(visit);
    feed_.visit_saved(visit);
  }

  norm norm1_;
  attention<T, MemorySpace> attn_;
  norm norm2_;
  Feed feed_;
  layout activation_;
  recompute_mode recompute_;
  activation input_;             // full recomputation: the input, kept from forward to backward
  double auxiliary_weight_ = 1;  // and the weight, for the forward run again
};

}  // namespace shardmesh::parallel
