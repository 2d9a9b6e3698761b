#pragma once
// Causal self-attention with the heads sharded on tp: the query, key and
// value projections column-parallel by heads ("btc,chd->bthd", W R,S(tp),R),
// scores and weighted values local per head, the output projection
// row-parallel ("bthd,hdc->btc", W S(tp),R,R) delivering the activation
// layout. Backward adds the three projections' partial input gradients and
// returns the sum still P(sum:tp): the block reduces it once.
//
// Optionally (a Llama-style block) rotary position embeddings of queries
// and keys, and grouped-query attention: fewer key/value heads than query
// heads, query head q reading key/value head q / group. The key and value
// projections are then either split on tp like the queries, where each
// rank's groups stay whole (tp divides the key/value heads), or held whole
// by every rank (fewer key/value heads than tp, or a split that would cut
// a group): each rank then computes every key/value head, copies out the
// ones its query heads read, and its key/value gradients are partial on tp,
// reduced once in the projections' weight gradients (linear.hpp).
//
// With selective recomputation (strategy/recomputation.hpp) the forward
// drops the probabilities and the backward computes them again from the
// kept queries and keys: the same kernels on the same inputs, so the
// gradients are bitwise those without.
//
// With context parallelism (the sequence split on "cp" in the balanced
// order, transformer_layouts.hpp) the core is ops::context_attention in the
// form asked for (ring or all-to-all), rotary reads each token's position
// from the order, and what the backward needs is the core's saved state
// (dropped and recomputed the same way under selective recomputation).

#include "shardmesh/nn/linear.hpp"
#include "shardmesh/ops/context_attention.hpp"
#include "shardmesh/ops/einsum.hpp"
#include "shardmesh/ops/elementwise.hpp"
#include "shardmesh/ops/heads.hpp"
#include "shardmesh/ops/layer_support.hpp"
#include "shardmesh/ops/softmax.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cmath>
#include <optional>
#include <string>
#include <utility>

namespace shardmesh::parallel {

template <class T, class MemorySpace>
class attention {
 public:
  using activation = dynamic_dtensor<T, 3, MemorySpace>;
  using heads = dynamic_dtensor<T, 4, MemorySpace>;
  using projection = linear<"btc,chd->bthd", T, MemorySpace>;
  using output = linear<"bthd,hdc->btc", T, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  // rotary_base: 0 for no rotary position embedding, else RoPE's base (10000 in Llama).
  attention() = default;
  // context: the core's form where the sequence is split on its axis (none: the sequence is whole).
  attention(projection q, projection k, projection v, output o, double rotary_base = 0,
            std::optional<ops::context_options> context = {})
      : q_(std::move(q)),
        k_(std::move(k)),
        v_(std::move(v)),
        o_(std::move(o)),
        rotary_base_(rotary_base),
        context_(std::move(context)) {
    std::size_t const d = q_.w().value().global_extents()[2];
    scale_ = static_cast<accumulation_t<T>>(1 / std::sqrt(static_cast<double>(d)));
  }

  // visit(name, parameter): prefix + "wq", "wk", "wv", "wo".
  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    visit(prefix + "wq", q_.w());
    visit(prefix + "wk", k_.w());
    visit(prefix + "wv", v_.w());
    visit(prefix + "wo", o_.w());
  }

  // Whether the forward keeps the probabilities (none) or the backward recomputes them (selective).
  void recompute_core(bool recompute) { recompute_core_ = recompute; }

  activation forward(activation const& x, exec_type const& exec = {}) {
    auto const rows = ops::to_layout(x, bind(x.mesh().shape(), q_.input_layout()), exec);  // gathered once
    query_ = rotated(q_.forward(rows, exec), exec);
    key_ = query_heads(rotated(k_.forward(rows, exec), exec), exec);
    value_ = query_heads(v_.forward(rows, exec), exec);
    if (context_) {
      auto [out, saved] = ops::context_attention(query_, key_, value_, *context_, exec);
      if (!recompute_core_) context_saved_ = std::move(saved);
      return o_.forward(out, exec);
    }
    probabilities_ = core(exec);
    activation y = o_.forward(ops::einsum<"bhts,bshd->bthd">(probabilities_, value_, exec), exec);
    if (recompute_core_) probabilities_ = {};
    return y;
  }

  template <class Visit>
  void visit_saved(Visit&& visit) {
    for (projection* p : {&q_, &k_, &v_}) p->visit_saved(visit);
    o_.visit_saved(visit);
    visit(query_);
    visit(key_);
    visit(value_);
    visit(probabilities_);
    visit(context_saved_);  // whole: its geometry and layouts go with its tensors
  }

  // The input gradient, P(sum:tp).
  activation backward(activation const& dy, exec_type const& exec = {}) {
    heads const d_out = o_.backward(dy, exec);
    auto [d_query, d_key, d_value] = context_ ? context_gradients(d_out, exec) : core_gradients(d_out, exec);
    query_ = key_ = value_ = {};
    probabilities_ = {};
    context_saved_ = {};
    activation dx = q_.backward(rotated_back(d_query, exec), exec);
    k_.backward(rotated_back(shared_heads(d_key, k_, exec), exec), dx, exec);  // summed by the GEMMs (beta = 1)
    v_.backward(shared_heads(d_value, v_, exec), dx, exec);
    return dx;
  }

 private:
  using gradients = ops::context_attention_gradients<T, MemorySpace>;

  gradients core_gradients(heads const& d_out, exec_type const& exec) {
    if (recompute_core_) probabilities_ = core(exec);
    auto const d_prob = ops::einsum<"bthd,bshd->bhts">(d_out, value_, exec);
    heads d_value = ops::einsum<"bhts,bthd->bshd">(probabilities_, d_out, exec);
    auto const d_scores = ops::softmax_backward(probabilities_, d_prob, exec);  // the scale is the GEMMs' alpha
    return {ops::einsum<"bhts,bshd->bthd">(scale_, d_scores, key_, exec),
            ops::einsum<"bhts,bthd->bshd">(scale_, d_scores, query_, exec), std::move(d_value)};
  }
  gradients context_gradients(heads const& d_out, exec_type const& exec) {
    if (recompute_core_) context_saved_ = ops::context_attention(query_, key_, value_, *context_, exec).saved;
    return ops::context_attention_backward(context_saved_, d_out, exec);
  }

  // The attention core: softmax of the scaled, causally masked scores.
  heads core(exec_type const& exec) const {
    return ops::softmax(ops::einsum<"bthd,bshd->bhts">(scale_, query_, key_, exec), ops::masking::causal, exec);
  }

  [[nodiscard]] std::size_t query_head_count() const { return q_.w().value().global_extents()[1]; }
  [[nodiscard]] bool grouped() const { return k_.w().value().global_extents()[1] != query_head_count(); }

  [[nodiscard]] std::optional<ops::sequence_split> split() const {
    if (!context_) return std::nullopt;
    return ops::sequence_split{context_->axis, context_->order};
  }
  heads rotated(heads const& x, exec_type const& exec) const {
    return rotary_base_ > 0 ? ops::rotary(x, rotary_base_, exec, split()) : x;
  }
  heads rotated_back(heads const& dy, exec_type const& exec) const {
    return rotary_base_ > 0 ? ops::rotary_backward(dy, rotary_base_, exec, split()) : dy;
  }
  // Keys or values of every query head, in the queries' layout.
  heads query_heads(heads const& shared, exec_type const& exec) const {
    return grouped() ? ops::expand_heads(shared, query_.bound(), query_head_count(), exec) : shared;
  }
  // Their gradient summed into the projection p's key/value heads.
  heads shared_heads(heads const& d, projection const& p, exec_type const& exec) const {
    if (!grouped()) return d;
    return ops::reduce_heads(d, bind(d.mesh().shape(), p.output_layout()), p.w().value().global_extents()[1], exec);
  }

  projection q_, k_, v_;
  output o_;
  double rotary_base_ = 0;
  accumulation_t<T> scale_ = 1;
  std::optional<ops::context_options> context_;
  bool recompute_core_ = false;
  heads query_, key_, value_;
  dynamic_dtensor<T, 4, MemorySpace> probabilities_;
  ops::context_attention_state<T, MemorySpace> context_saved_;
};

}  // namespace shardmesh::parallel
