#pragma once
// What each of the library's layers adds to the stage that holds it, as the
// planner sees it: the tensors it keeps for its backward, its local products
// and kernels (stage_work.hpp) and the redistributions it plans, read off
// the same transformer layouts the layers in nn/ place their tensors with.
// A layer kind is declared here once; a model's description is the sum of
// the declarations of the layers its stages hold (decoder_description.hpp,
// and a model of the user's own, tests/parallel/residual_mlp.hpp), so two
// models that use a layer describe it alike.
//
//   stage_declaration d = declare_norm(at, "ln1", true);
//   d += declare_attention(at, {heads, kv_heads, head_size, false});
//
// Work is what the stage mesh's rank 0 does (the largest shards: blocks
// split with the remainder first). Flops count the products (2 per
// multiply-add; causal masking skips none); a backward product costs twice
// its forward. Kernels are declared by kind and element count and priced
// by calibration; a kind the library has not calibrated is priced as the
// nearest one (an RMS norm as a layer norm, SwiGLU's gating and the rotary
// embedding as GELU, the copies of grouped key/value heads as additions).
// The redistributions are Megatron's: a row-parallel or vocabulary-parallel
// output P(sum:tp) reduced into the activation layout (all-reduce; a
// reduce-scatter onto the sequence with sequence parallelism, whose
// activations are all-gathered before each column-parallel input, and
// their gradients likewise); weight gradients stay partial on dp, which
// the trainer reduces per bucket.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/plan/stage_work.hpp"
#include "shardmesh/strategy/table_gradient.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

// What one or more layers add to a stage.
struct stage_declaration {
  std::vector<saved_spec> saved;
  stage_work work;
  std::vector<transition_spec> transitions;
  stage_work core;  // what selective recomputation runs again (model_description.hpp)

  stage_declaration& operator+=(stage_declaration const& more) {
    auto const append = [](auto& to, auto const& from) { to.insert(to.end(), from.begin(), from.end()); };
    append(saved, more.saved);
    for (auto [to, from] : {std::pair{&work, &more.work}, std::pair{&core, &more.core}}) {
      append(to->products, from->products);
      append(to->forward, from->forward);
      append(to->input, from->input);
      append(to->weight, from->weight);
    }
    append(transitions, more.transitions);
    return *this;
  }
};

// Where layers are declared: a stage mesh (dp and tp axes; dp may be
// absent), the layouts on it, and a micro-batch of `samples` sequences of
// `sequence` tokens of `hidden` features over every data-parallel replica.
class layer_site {
 public:
  layer_site(mesh_shape mesh, bool sequence_parallel, std::size_t samples, std::size_t sequence, std::size_t hidden)
      : mesh_(std::move(mesh)),
        layouts_(mesh_, sequence_parallel),
        sequence_parallel_(sequence_parallel),
        samples_(samples),
        sequence_(sequence),
        hidden_(hidden) {}

  [[nodiscard]] mesh_shape const& mesh() const { return mesh_; }
  [[nodiscard]] transformer_layouts const& layouts() const { return layouts_; }
  [[nodiscard]] bool sequence_parallel() const { return sequence_parallel_; }
  [[nodiscard]] std::size_t samples() const { return samples_; }
  [[nodiscard]] std::size_t sequence() const { return sequence_; }
  [[nodiscard]] std::size_t hidden() const { return hidden_; }
  [[nodiscard]] bool data_parallel() const { return mesh_.find("dp") != npos; }

  // [samples, sequence, hidden]: an activation's global extents.
  [[nodiscard]] std::vector<std::size_t> activation() const { return {samples_, sequence_, hidden_}; }
  // [samples, sequence, n].
  [[nodiscard]] std::vector<std::size_t> tokens_by(std::size_t n) const { return {samples_, sequence_, n}; }
  // Rank 0's block of a tensor of `global` extents in layout l.
  [[nodiscard]] tensor_index local(layout const& l, std::vector<std::size_t> const& global) const {
    tensor_index extents{};
    std::copy(global.begin(), global.end(), extents.begin());
    return local_extents(mesh_, bind(mesh_, l), extents, 0);
  }
  // Rank 0's samples and tokens with the sequence whole (a column-parallel input).
  [[nodiscard]] std::size_t local_samples() const { return local(layouts_.whole_rows, activation())[0]; }
  [[nodiscard]] std::size_t local_tokens() const {
    tensor_index const whole = local(layouts_.whole_rows, activation());
    return whole[0] * whole[1];
  }
  // Rank 0's elements of an activation between layers.
  [[nodiscard]] double activation_elements() const {
    tensor_index const rows = local(layouts_.activation, activation());
    return static_cast<double>(rows[0] * rows[1] * rows[2]);
  }

  [[nodiscard]] bound_layout bound(layout const& l) const { return bind(mesh_, l); }
  // l made partial on tp.
  [[nodiscard]] bound_layout on_tp(layout const& l, reduce_op op = reduce_op::sum) const {
    return bound(l.partial(op, "tp"));
  }
  // A weight gradient's layout: partial on dp (the batch), as the trainer accumulates it.
  [[nodiscard]] bound_layout gradient(layout const& l) const { return bound(batch_partial(l)); }
  // ... and partial on tp too (a gradient each tensor-parallel rank holds a part of).
  [[nodiscard]] bound_layout gradient_on_tp(layout const& l) const {
    return bound(batch_partial(l).partial(reduce_op::sum, "tp"));
  }

 private:
  [[nodiscard]] layout batch_partial(layout const& l) const {
    return data_parallel() ? l.partial(reduce_op::sum, "dp") : l;
  }

  mesh_shape mesh_;
  transformer_layouts layouts_;
  bool sequence_parallel_;
  std::size_t samples_, sequence_, hidden_;
};

// A norm (layer norm, or RMS norm when not `centred`) named `name`: keeps
// its input, each row's mean (a layer norm's) and 1/std; with sequence
// parallelism its gain's (and bias's) gradients are summed over tp.
[[nodiscard]] inline stage_declaration declare_norm(layer_site const& at, std::string const& name, bool centred) {
  transformer_layouts const& L = at.layouts();
  stage_declaration d;
  d.saved = {{name + ".x", at.activation(), L.activation}};
  if (centred) d.saved.push_back({name + ".mean", at.activation(), L.activation, true});
  d.saved.push_back({name + ".rstd", at.activation(), L.activation, true});
  d.work.forward = {{kernel_kind::layer_norm_forward, at.activation_elements()}};
  d.work.input = {{kernel_kind::layer_norm_backward, at.activation_elements()}};  // the residual's gradient added
  if (at.sequence_parallel())
    for (int v = 0; v < (centred ? 2 : 1); ++v)
      d.transitions.push_back({true, {at.hidden()}, at.gradient_on_tp(L.vector), at.gradient(L.vector)});
  return d;
}

// A residual connection: the branch's output added to its input.
[[nodiscard]] inline stage_declaration declare_residual(layer_site const& at) {
  stage_declaration d;
  d.work.forward = {{kernel_kind::add, at.activation_elements()}};
  return d;
}

namespace detail {

// A tensor-parallel branch (a column-parallel layer named `first` in, a
// row-parallel layer out): the first keeps its input with the sequence
// whole; the output P(sum:tp) is reduced into the activation layout, and
// the input's gradient likewise; with sequence parallelism the input is
// gathered first, and the output's gradient before the row-parallel's
// backward.
[[nodiscard]] inline stage_declaration tensor_parallel_branch(layer_site const& at, std::string const& first) {
  transformer_layouts const& L = at.layouts();
  std::vector<std::size_t> const act = at.activation();
  stage_declaration d;
  d.saved = {{first + ".x", act, L.whole_rows}};
  for (bool in_backward : {false, true}) {
    if (at.sequence_parallel())
      d.transitions.push_back({in_backward, act, at.bound(L.activation), at.bound(L.whole_rows)});
    d.transitions.push_back({in_backward, act, at.on_tp(L.whole_rows), at.bound(L.activation)});
  }
  return d;
}

}  // namespace detail

// Attention's sizes: query heads, key/value heads (fewer where grouped),
// the head size, and whether queries and keys are rotated (RoPE).
struct attention_sizes {
  std::size_t heads = 0, kv_heads = 0, head_size = 0;
  bool rotary = false;
};

// The key/value projections' weight [c, kv, d] and output [b, t, kv, d]
// layouts: split on tp like the queries where each rank's query heads then
// read only its own key/value heads (as many as the query heads, or tp
// dividing them), else held whole by every rank (nn/attention.hpp).
struct kv_layouts {
  layout weight, output;
};
[[nodiscard]] inline kv_layouts kv_projection_layouts(std::size_t heads, std::size_t kv_heads, mesh_shape const& mesh,
                                                      bool sequence_parallel) {
  transformer_layouts const L(mesh, sequence_parallel);
  std::size_t const tp = mesh.extent(mesh.find("tp"));
  if (kv_heads == heads || kv_heads % tp == 0) return {L.heads_in, L.heads};
  return {layout{replicated, replicated, replicated}, layout{L.whole_rows[0], L.whole_rows[1], replicated, replicated}};
}

// Multi-head attention (nn/attention.hpp): projections qkv (its input kept)
// and o, scores and weighted values over the whole sequence; keeps the
// (rotated) queries, keys and values per query head, the probabilities and
// the weighted values. Key/value projections held whole by every rank have
// their weight gradients summed over tp.
[[nodiscard]] inline stage_declaration declare_attention(layer_site const& at, attention_sizes const& a) {
  transformer_layouts const& L = at.layouts();
  std::size_t const S = at.sequence(), D = a.head_size, t = at.local_tokens(), b = at.local_samples();
  layout const kv_weight = kv_projection_layouts(a.heads, a.kv_heads, at.mesh(), at.sequence_parallel()).weight;
  std::size_t const heads = at.local(L.heads_in, {at.hidden(), a.heads, D})[1];
  std::size_t const kv = at.local(kv_weight, {at.hidden(), a.kv_heads, D})[1];
  std::size_t const hd = heads * D, kvd = kv * D;
  std::vector<std::size_t> const per_head{at.samples(), S, a.heads, D};
  stage_declaration d = detail::tensor_parallel_branch(at, "qkv");
  d.saved.insert(d.saved.end(), {{"query", per_head, L.heads},
                                 {"key", per_head, L.heads},  // copied out per query head where grouped
                                 {"value", per_head, L.heads},
                                 {"probabilities", {at.samples(), a.heads, S, S}, L.scores, false, true},
                                 {"o.x", per_head, L.heads}});  // the weighted values
  if (kv == heads)
    d.work.products = {{3, t, hd, at.hidden(), true}};  // q, k, v
  else
    d.work.products = {{1, t, hd, at.hidden(), true}, {2, t, kvd, at.hidden(), true}};
  d.work.products.insert(d.work.products.end(), {{b * heads, S, S, D, false},      // scores
                                                 {b * heads, S, D, S, false},      // weighted values
                                                 {1, t, at.hidden(), hd, true}});  // o
  double const scores = static_cast<double>(b * heads * S * S), tokens = static_cast<double>(t);
  d.work.forward = {{kernel_kind::softmax_forward, scores}};
  d.work.input = {{kernel_kind::softmax_backward, scores}};
  d.core.products = {{b * heads, S, S, D, false}};  // the scores, and their softmax, again
  d.core.forward = {{kernel_kind::softmax_forward, scores}};
  if (a.kv_heads != a.heads) {  // keys and values copied out per query head, their gradients summed back
    d.work.forward.push_back({kernel_kind::add, tokens * static_cast<double>(hd), 2});
    d.work.input.push_back({kernel_kind::add, tokens * static_cast<double>(hd), 2});
  }
  if (a.rotary) {  // queries and keys rotated, and their gradients rotated back
    d.work.forward.push_back({kernel_kind::gelu_forward, tokens * static_cast<double>(hd + kvd)});
    d.work.input.push_back({kernel_kind::gelu_forward, tokens * static_cast<double>(hd + kvd)});
  }
  if (kv_weight != L.heads_in)  // wk and wv held whole: their gradients are partial on tp
    for (int w = 0; w < 2; ++w)
      d.transitions.push_back(
          {true, {at.hidden(), a.kv_heads, D}, at.gradient_on_tp(kv_weight), at.gradient(kv_weight)});
  return d;
}

// An MLP of width `width` (nn/mlp.hpp: w1, GELU, w2) or, `gated`, SwiGLU
// (nn/swiglu_mlp.hpp: gate w1 and up w3 on one input, w2): keeps the
// hidden features before and after the activation (gate and up where gated).
[[nodiscard]] inline stage_declaration declare_mlp(layer_site const& at, std::size_t width, bool gated) {
  transformer_layouts const& L = at.layouts();
  std::size_t const t = at.local_tokens(), f = at.local(L.column, {at.hidden(), width})[1];
  std::vector<std::size_t> const wide = at.tokens_by(width);
  stage_declaration d = detail::tensor_parallel_branch(at, "w1");
  if (gated)
    d.saved.insert(d.saved.end(), {{"gate", wide, L.features}, {"up", wide, L.features}});
  else
    d.saved.push_back({"hidden", wide, L.features});
  d.saved.push_back({"w2.x", wide, L.features});
  d.work.products = {{gated ? 2U : 1U, t, f, at.hidden(), true}, {1, t, at.hidden(), f, true}};
  double const features = static_cast<double>(t * f);
  d.work.forward = {{kernel_kind::gelu_forward, features}};  // GELU, or SwiGLU's gating
  d.work.input = {{kernel_kind::gelu_backward, features}};
  return d;
}

// The token embedding over a vocabulary sharded on tp (nn/embedding.hpp),
// and a learned position table added where `positions`: the lookup's
// partial sum reduced; the token table's gradient onehot^T dX planned as
// the embedding plans it (plan_table_gradient); the positions' gradient dX
// summed over the batch in dX's placement of the sequence.
[[nodiscard]] inline stage_declaration declare_embedding(layer_site const& at, std::size_t vocabulary, bool positions) {
  transformer_layouts const& L = at.layouts();
  std::vector<std::size_t> const act = at.activation();
  double const tokens = static_cast<double>(at.local_tokens()), hidden = static_cast<double>(at.hidden());
  stage_declaration d;
  d.work.forward = {{kernel_kind::embedding_forward, tokens * hidden}};
  d.work.weight = {
      {kernel_kind::fill, static_cast<double>(at.local(L.vocabulary, {vocabulary, at.hidden()})[0]) * hidden},
      {kernel_kind::embedding_backward, tokens * hidden}};
  d.transitions.push_back({false, act, at.on_tp(L.whole_rows), at.bound(L.activation)});  // the lookup
  op_layouts const plan =
      plan_table_gradient(at.mesh(), at.bound(L.ids), at.bound(L.activation), {at.samples(), at.sequence(), vocabulary},
                          {at.samples(), at.sequence(), at.hidden()}, at.gradient(L.vocabulary));
  d.transitions.push_back(
      {true, {at.samples(), at.sequence()}, at.bound(L.ids), table_gradient_ids(plan), sizeof(int)});
  d.transitions.push_back({true, act, at.bound(L.activation), plan.b});
  d.transitions.push_back({true, {vocabulary, at.hidden()}, plan.c, at.gradient(L.vocabulary)});
  if (positions) {
    d.work.forward.push_back({kernel_kind::add, at.activation_elements()});
    d.work.weight.push_back({kernel_kind::add, at.activation_elements()});
    bound_layout summed = at.bound(L.activation);
    summed.rank = 2;
    summed.dims[0] = summed.dims[1];
    summed.dims[1] = summed.dims[2];
    d.transitions.push_back(
        {true, {at.sequence(), at.hidden()}, at.gradient(unbind(at.mesh(), summed)), at.gradient(L.matrix)});
  }
  return d;
}

// The output head [hidden, vocabulary], column-parallel (vocabulary
// sharded on tp): keeps its input; its input's gradient reduced.
[[nodiscard]] inline stage_declaration declare_head(layer_site const& at, std::size_t vocabulary) {
  transformer_layouts const& L = at.layouts();
  std::vector<std::size_t> const act = at.activation();
  stage_declaration d;
  d.saved = {{"whead.x", act, L.whole_rows}};
  d.work.products = {{1, at.local_tokens(), at.local(L.features, at.tokens_by(vocabulary))[2], at.hidden(), true}};
  if (at.sequence_parallel()) d.transitions.push_back({false, act, at.bound(L.activation), at.bound(L.whole_rows)});
  d.transitions.push_back({true, act, at.on_tp(L.whole_rows), at.bound(L.activation)});
  return d;
}

// The cross-entropy over logits sharded on the vocabulary: keeps the
// logits, each row's largest and its sum of exponentials; three row
// reductions over the vocabulary shards, and the loss and the rows that
// count (two doubles) summed over the replicas.
[[nodiscard]] inline stage_declaration declare_loss(layer_site const& at, std::size_t vocabulary) {
  transformer_layouts const& L = at.layouts();
  std::vector<std::size_t> const logits = at.tokens_by(vocabulary), rows{at.samples(), at.sequence()};
  double const elements = static_cast<double>(at.local_tokens() * at.local(L.features, logits)[2]);
  stage_declaration d;
  d.saved = {{"logits", logits, L.features}, {"max", logits, L.features, true}, {"sum_exp", logits, L.features, true}};
  d.work.forward = {{kernel_kind::cross_entropy_forward, elements}};
  d.work.input = {{kernel_kind::cross_entropy_backward, elements}};
  d.transitions = {{false, rows, at.on_tp(L.ids, reduce_op::max), at.bound(L.ids)},  // the largest logit
                   {false, rows, at.on_tp(L.ids), at.bound(L.ids)},                  // the sum of exponentials
                   {false, rows, at.on_tp(L.ids), at.bound(L.ids)}};                 // the target's logit
  if (at.data_parallel())
    d.transitions.push_back({false,
                             {2},
                             at.bound(layout{replicated}.partial(reduce_op::sum, "dp")),
                             at.bound(layout{replicated}),
                             sizeof(double)});
  return d;
}

// A stage holding `parameters`: each weight gradient is added into the parameter's accumulated one.
[[nodiscard]] inline stage_description declared_stage(layer_site const& at, std::string name, stage_place place,
                                                      stage_kind kind, std::vector<parameter_spec> parameters,
                                                      stage_declaration layers) {
  for (parameter_spec const& p : parameters)
    layers.work.weight.push_back(
        {kernel_kind::add, static_cast<double>(local_elements(at.mesh(), p.placement, p.extents, 0))});
  return {std::move(name),
          place,
          kind,
          std::move(parameters),
          std::move(layers.saved),
          std::move(layers.work),
          std::move(layers.transitions),
          std::move(layers.core)};
}

}  // namespace shardmesh::parallel
