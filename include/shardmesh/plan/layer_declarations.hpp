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
// the trainer reduces per bucket, and are reduced over the other axes that
// split the batch's tokens (cp, ep) where each parameter accumulates them.
// With a "cp" axis attention is context-parallel (ops/context_attention.hpp:
// the ring's point-to-point blocks, or the all-to-all form's transitions);
// a mixture of experts' token exchange is priced for tokens routed evenly
// (declare_experts).
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/sequence_chunks.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/plan/stage_work.hpp"
#include "shardmesh/strategy/table_gradient.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

// What one or more layers add to a stage.
struct stage_declaration {
  std::vector<saved_spec> saved;
  stage_work work;
  std::vector<transition_spec> transitions;
  stage_work core;  // what selective recomputation runs again (model_description.hpp)
  std::vector<exchange_spec> exchanges;

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
    append(exchanges, more.exchanges);
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
  // The extent of the mesh axis `name` (1 where the mesh has none).
  [[nodiscard]] std::size_t extent(std::string_view name) const {
    std::size_t const a = mesh_.find(name);
    return a == npos ? 1 : mesh_.extent(a);
  }
  // l made partial on tp.
  [[nodiscard]] bound_layout on_tp(layout const& l, reduce_op op = reduce_op::sum) const {
    return bound(l.partial(op, "tp"));
  }
  // A weight gradient's layout: partial on dp (the batch), as the trainer accumulates it.
  [[nodiscard]] bound_layout gradient(layout const& l) const { return bound(batch_partial(l)); }
  // A weight gradient as a layer makes it: partial on dp and on the other
  // axes that split the tokens (cp, ep) where they do not split the weight.
  [[nodiscard]] bound_layout made_gradient(layout const& l) const { return bound(made(l)); }
  // ... and partial on tp too (a gradient each tensor-parallel rank holds a part of).
  [[nodiscard]] bound_layout gradient_on_tp(layout const& l) const {
    return bound(made(l).partial(reduce_op::sum, "tp"));
  }

 private:
  [[nodiscard]] layout made(layout const& l) const {
    layout out = batch_partial(l);
    bound_layout const placed = bound(l);
    auto const splits = [&](std::size_t axis) {
      for (std::size_t d = 0; d < placed.rank; ++d)
        for (std::size_t i = 0; i < placed.dims[d].count; ++i)
          if (placed.dims[d].axes[i] == axis) return true;
      return false;
    };
    if (std::size_t const a = mesh_.find("cp"); a != npos && !splits(a)) out = out.partial(reduce_op::sum, "cp");
    if (std::size_t const a = mesh_.find("ep"); a != npos && !splits(a)) out = out.partial(reduce_op::sum, "ep");
    return out;
  }

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
      d.transitions.push_back({true,
                               {at.hidden()},
                               at.gradient_on_tp(L.vector),
                               at.gradient(L.vector),
                               0,
                               name + (v == 0 ? " gain gradient" : " bias gradient")});
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
    if (at.sequence_parallel())  // the input gathered, or the output's gradient
      d.transitions.push_back({in_backward, act, at.bound(L.activation), at.bound(L.whole_rows), 0,
                               in_backward ? first + " branch output gradient" : first + ".x"});
    d.transitions.push_back({in_backward, act, at.on_tp(L.whole_rows), at.bound(L.activation), 0,
                             in_backward ? first + ".x gradient" : first + " branch output"});
  }
  return d;
}

}  // namespace detail

// Attention's sizes: query heads, key/value heads (fewer where grouped),
// the head size, and whether queries and keys are rotated (RoPE).
struct attention_sizes {
  std::size_t heads = 0, kv_heads = 0, head_size = 0;
  bool rotary = false;
  context_form context = context_form::ring;  // on a mesh with a "cp" axis
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
// their weight gradients summed over tp. With a "cp" axis the core is
// context-parallel: no probabilities, each row's logsumexp instead; the
// ring passes key/value blocks (ring_attention_traffic), the all-to-all
// form moves queries, keys, values and output between S(seq:cp) and
// S(heads:cp) and keeps its copies.
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
                                 {"o.x", per_head, L.heads}});  // the weighted values
  if (kv == heads)
    d.work.products = {{3, t, hd, at.hidden(), true}};  // q, k, v
  else
    d.work.products = {{1, t, hd, at.hidden(), true}, {2, t, kvd, at.hidden(), true}};
  // The core: rows queries of `core_heads` heads per sample against the whole sequence.
  std::size_t rows = S, core_heads = heads;
  if (std::size_t const cp = at.mesh().find("cp"); cp == npos) {
    d.saved.push_back({"probabilities", {at.samples(), a.heads, S, S}, L.scores, false, true});
  } else if (a.context == context_form::ring) {
    rows = at.local(L.heads, per_head)[1];
    d.saved.push_back({"lse", per_head, L.heads, true, true});
    ring_traffic const elements = ring_attention_traffic(at.mesh().extent(cp), b * rows * heads * D, 1, 0);
    ring_traffic const statistics = ring_attention_traffic(at.mesh().extent(cp), b * rows * heads * D, 0, 1);
    for (bool in_backward : {false, true}) {
      ring_exchanges const& e = in_backward ? elements.backward : elements.forward;
      d.exchanges.push_back({in_backward, step_kind::permute, "cp", e.exchanges, static_cast<double>(e.bytes),
                             static_cast<double>((in_backward ? statistics.backward : statistics.forward).bytes),
                             in_backward ? "key/value blocks and their gradients" : "key/value blocks"});
    }
  } else {
    bound_layout const split = heads_split_on(at.bound(L.heads), cp);
    layout const held = unbind(at.mesh(), split);
    core_heads = at.local(held, per_head)[2];
    d.saved.insert(d.saved.end(), {{"context.query", per_head, held, false, true},
                                   {"context.key", per_head, held, false, true},
                                   {"context.value", per_head, held, false, true},
                                   {"context.out", per_head, held, false, true},
                                   {"lse", per_head, held, true, true}});
    for (std::string const moved : {"query", "key", "value", "o.x"}) {  // q, k, v over, out back; gradients back
      bool const in = moved != "o.x";
      d.transitions.push_back(
          {false, per_head, in ? at.bound(L.heads) : split, in ? split : at.bound(L.heads), 0, moved});
      d.transitions.push_back(
          {true, per_head, in ? split : at.bound(L.heads), in ? at.bound(L.heads) : split, 0, moved + " gradient"});
    }
  }
  d.work.products.insert(d.work.products.end(), {{b * core_heads, rows, S, D, false},  // scores
                                                 {b * core_heads, rows, D, S, false},  // weighted values
                                                 {1, t, at.hidden(), hd, true}});      // o
  double const scores = static_cast<double>(b * core_heads * rows * S), tokens = static_cast<double>(t);
  d.work.forward = {{kernel_kind::softmax_forward, scores}};
  d.work.input = {{kernel_kind::softmax_backward, scores}};
  d.core.products = {{b * core_heads, rows, S, D, false}};  // the scores, and their softmax, again
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
    for (char const* w : {"wk gradient", "wv gradient"})
      d.transitions.push_back(
          {true, {at.hidden(), a.kv_heads, D}, at.gradient_on_tp(kv_weight), at.gradient(kv_weight), 0, w});
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

// A mixture of experts (nn/mixture_of_experts.hpp) of `experts` GELU MLPs
// of width `width`, each token to `top_k`, on the activation layout's
// tokens: keeps its input, the rows its experts received, their hidden
// features, the outputs back at the slots and the gates; a router product
// and each expert's two; per move one uneven all-to-all on ep (dispatch and
// combine forward, both again backward). Priced for tokens routed evenly:
// each rank's experts receive top_k rows per token it holds, a share
// (ep - 1) / ep of them from other ranks. (The counts' all-gather and the
// auxiliary losses' all-reduce, a few numbers each, are not priced.)
[[nodiscard]] inline stage_declaration declare_experts(layer_site const& at, std::size_t experts, std::size_t top_k,
                                                       std::size_t width) {
  transformer_layouts const& L = at.layouts();
  tensor_index const here = at.local(L.activation, at.activation());
  std::size_t const n = here[0] * here[1], m = n * top_k, C = at.hidden();
  stage_declaration d;
  d.saved = {{"experts.x", at.activation(), L.activation},
             {"experts.rows", at.tokens_by(top_k * C), L.activation},
             {"experts.hidden", at.tokens_by(top_k * width), L.activation},
             {"experts.slots", at.tokens_by(top_k * C), L.activation},
             {"experts.gates",
              {at.samples(), at.sequence(), top_k, 1},
              {L.activation[0], L.activation[1], replicated, replicated},
              true}};
  d.work.products = {{1, n, experts, C, true}, {1, m, width, C, true}, {1, m, C, width, true}};
  double const hidden = static_cast<double>(m * width), slots = static_cast<double>(m * C);
  d.work.forward = {{kernel_kind::gelu_forward, hidden}, {kernel_kind::add, slots}};
  d.work.input = {{kernel_kind::gelu_backward, hidden}, {kernel_kind::add, slots, 2}};
  if (std::size_t const ep = at.extent("ep"); ep > 1) {
    double const moved = static_cast<double>(m * C) * static_cast<double>(ep - 1) / static_cast<double>(ep);
    for (bool in_backward : {false, true})
      d.exchanges.push_back(
          {in_backward, step_kind::all_to_all_v, "ep", 2, 2 * moved, 0, in_backward ? "tokens' gradients" : "tokens"});
  }
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
  d.transitions.push_back({false, act, at.on_tp(L.whole_rows), at.bound(L.activation), 0, "embedding output"});
  op_layouts const plan =
      plan_table_gradient(at.mesh(), at.bound(L.ids), at.bound(L.activation), {at.samples(), at.sequence(), vocabulary},
                          {at.samples(), at.sequence(), at.hidden()}, at.gradient(L.vocabulary));
  d.transitions.push_back(
      {true, {at.samples(), at.sequence()}, at.bound(L.ids), table_gradient_ids(plan), sizeof(int), "token ids"});
  d.transitions.push_back({true, act, at.bound(L.activation), plan.b, 0, "embedding output gradient"});
  d.transitions.push_back({true, {vocabulary, at.hidden()}, plan.c, at.gradient(L.vocabulary), 0, "wte gradient"});
  if (positions) {
    d.work.forward.push_back({kernel_kind::add, at.activation_elements()});
    d.work.weight.push_back({kernel_kind::add, at.activation_elements()});
    bound_layout summed = at.bound(L.activation);
    summed.rank = 2;
    summed.dims[0] = summed.dims[1];
    summed.dims[1] = summed.dims[2];
    d.transitions.push_back({true,
                             {at.sequence(), at.hidden()},
                             at.gradient(unbind(at.mesh(), summed)),
                             at.gradient(L.matrix),
                             0,
                             "wpe gradient"});
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
  if (at.sequence_parallel())
    d.transitions.push_back({false, act, at.bound(L.activation), at.bound(L.whole_rows), 0, "whead.x"});
  d.transitions.push_back({true, act, at.on_tp(L.whole_rows), at.bound(L.activation), 0, "whead.x gradient"});
  return d;
}

// The cross-entropy over logits sharded on the vocabulary: keeps the
// logits, each row's largest and its sum of exponentials; three row
// reductions over the vocabulary shards, and the loss and the rows that
// count (two doubles) summed over the replicas (and the cp and ep ranks).
[[nodiscard]] inline stage_declaration declare_loss(layer_site const& at, std::size_t vocabulary) {
  transformer_layouts const& L = at.layouts();
  std::vector<std::size_t> const logits = at.tokens_by(vocabulary), rows{at.samples(), at.sequence()};
  double const elements = static_cast<double>(at.local_tokens() * at.local(L.features, logits)[2]);
  stage_declaration d;
  d.saved = {{"logits", logits, L.features}, {"max", logits, L.features, true}, {"sum_exp", logits, L.features, true}};
  d.work.forward = {{kernel_kind::cross_entropy_forward, elements}};
  d.work.input = {{kernel_kind::cross_entropy_backward, elements}};
  d.transitions = {{false, rows, at.on_tp(L.ids, reduce_op::max), at.bound(L.ids), 0, "max"},
                   {false, rows, at.on_tp(L.ids), at.bound(L.ids), 0, "sum_exp"},
                   {false, rows, at.on_tp(L.ids), at.bound(L.ids), 0, "target logits"}};
  if (at.data_parallel())  // over every axis that splits the tokens: dp, and cp and ep where the mesh has them
    d.transitions.push_back({false,
                             {2},
                             at.made_gradient(layout{replicated}),
                             at.bound(layout{replicated}),
                             sizeof(double),
                             "loss and rows counted"});
  return d;
}

// A stage holding `parameters`: each weight gradient is added into the
// parameter's accumulated one, reduced first over the axes besides dp that
// split the tokens (cp, ep) unless its layer declared its reduction.
[[nodiscard]] inline stage_description declared_stage(layer_site const& at, std::string name, stage_place place,
                                                      stage_kind kind, std::vector<parameter_spec> parameters,
                                                      stage_declaration layers) {
  std::vector<transition_spec> reductions;
  for (parameter_spec const& p : parameters) {
    layers.work.weight.push_back(
        {kernel_kind::add, static_cast<double>(local_elements(at.mesh(), p.placement, p.extents, 0))});
    bound_layout const made = at.made_gradient(p.placement), kept = at.gradient(p.placement);
    bool const declared =
        std::any_of(layers.transitions.begin(), layers.transitions.end(),
                    [&](transition_spec const& t) { return t.in_backward && t.to == kept && t.extents == p.extents; });
    if (made != kept && !declared) reductions.push_back({true, p.extents, made, kept, 0, p.name + " gradient"});
  }
  layers.transitions.insert(layers.transitions.end(), reductions.begin(), reductions.end());
  return {std::move(name),
          place,
          kind,
          std::move(parameters),
          std::move(layers.saved),
          std::move(layers.work),
          std::move(layers.transitions),
          std::move(layers.core),
          std::move(layers.exchanges)};
}

}  // namespace shardmesh::parallel
