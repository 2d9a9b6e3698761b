#pragma once
// A decoder-only model (models/decoder.hpp) as the planner sees it: what
// each stage keeps for its backward, the local products and kernels a rank
// makes for it per micro-batch (stage_work.hpp: shapes read off the same
// layouts the layers use), and the redistributions it plans, for the GPT
// and the Llama-style model alike. The two differ in a few facts
// (decoder_sizes): learned positions or none, layer norms or RMS norms, a
// GELU or a gated (SwiGLU) MLP, rotary embeddings, and fewer key/value
// heads than query heads. Each architecture declares its parameters
// (gpt_description.hpp, llama_description.hpp); everything else here is
// read from those facts and the transformer layouts.
//
// Flops count the products (2 per multiply-add): the projections, the
// attention scores and weighted values over the whole sequence (causal
// masking does not skip them), the MLP and the head; a backward product
// costs twice its forward (the input gradient and the weight gradient).
// Elementwise and row kernels are declared by kind and element count: they
// are memory- or transcendental-bound, and their time is what the
// planner's calibrated kernel rates are for. The Llama's kernels are priced
// by the nearest calibrated kind: an RMS norm as a layer norm (one pass
// fewer: an over-estimate), SwiGLU's gating and the rotary embedding as
// GELU (an exponential or a sine and cosine per element), the copies of
// grouped key/value heads as an addition.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/contraction.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/models/decoder_stages.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/plan/stage_work.hpp"
#include "shardmesh/strategy/table_gradient.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

// What the planner needs to know of a decoder's sizes and parts.
struct decoder_sizes {
  std::size_t vocabulary = 0, sequence = 0, hidden = 0, heads = 0, kv_heads = 0, head_size = 0, ffn = 0, layers = 0;
  bool sequence_parallel = false;
  bool positions = true;  // a learned position table (the GPT's), or none (rotary embeddings place tokens)
  bool centred = true;    // layer norms (mean and bias), or RMS norms
  bool gated = false;     // a SwiGLU MLP (gate and up), or a GELU MLP
};

// "name is 0" for the first size that is 0, or nothing: a config's check of its sizes.
[[nodiscard]] inline std::string zero_size_error(std::initializer_list<std::pair<char const*, std::size_t>> sizes) {
  for (auto const& [name, value] : sizes)
    if (value == 0) return std::string(name) + " is 0";
  return {};
}

// The key/value projections' weight [c, kv, d] and output [b, t, kv, d]
// layouts: split on tp like the queries where each rank's query heads then
// read only its own key/value heads (as many as the query heads, or tp
// dividing them), else held whole by every rank (nn/attention.hpp).
struct kv_layouts {
  layout weight, output;
};
[[nodiscard]] inline kv_layouts kv_projection_layouts(decoder_sizes const& c, mesh_shape const& mesh) {
  transformer_layouts const L(mesh, c.sequence_parallel);
  std::size_t const tp = mesh.extent(mesh.find("tp"));
  if (c.kv_heads == c.heads || c.kv_heads % tp == 0) return {L.heads_in, L.heads};
  return {layout{replicated, replicated, replicated}, layout{L.whole_rows[0], replicated, replicated, replicated}};
}

// What stage `stage` keeps per micro-batch of `samples` sequences (over every replica), as the layers save it.
[[nodiscard]] inline std::vector<saved_spec> decoder_stage_saved(decoder_sizes const& c, mesh_shape const& mesh,
                                                                 std::size_t stage, std::size_t samples) {
  transformer_layouts const L(mesh, c.sequence_parallel);
  std::vector<std::size_t> const act{samples, c.sequence, c.hidden};
  std::vector<std::size_t> const heads{samples, c.sequence, c.heads, c.head_size};
  std::vector<std::size_t> const ffn{samples, c.sequence, c.ffn};
  std::vector<saved_spec> out;
  auto const append = [&](std::vector<saved_spec> more) { out.insert(out.end(), more.begin(), more.end()); };
  // A norm keeps its input, each row's mean (a layer norm's) and 1/std; the linear layer after it, its output
  // with the sequence whole (the same tensor without sequence parallelism).
  auto const norm = [&](std::string const& name, std::string const& next) {
    append({{name + ".x", act, L.activation}});
    if (c.centred) append({{name + ".mean", act, L.activation, true}});
    append({{name + ".rstd", act, L.activation, true}, {next + ".x", act, L.whole_rows}});
  };
  if (stage >= 1 && stage <= c.layers) {
    norm("ln1", "qkv");
    append({{"query", heads, L.heads},  // rotated; keys and values copied out per query head where grouped
            {"key", heads, L.heads},
            {"value", heads, L.heads},
            {"probabilities", {samples, c.heads, c.sequence, c.sequence}, L.scores},
            {"o.x", heads, L.heads}});  // the weighted values
    norm("ln2", "w1");
    if (c.gated)
      append({{"gate", ffn, L.features}, {"up", ffn, L.features}, {"w2.x", ffn, L.features}});
    else
      append({{"hidden", ffn, L.features}, {"w2.x", ffn, L.features}});  // before and after GELU
  } else if (stage == c.layers + 1) {
    norm("lnf", "whead");
  } else if (stage == c.layers + 2) {
    std::vector<std::size_t> const logits{samples, c.sequence, c.vocabulary};
    append({{"logits", logits, L.features}, {"max", logits, L.features, true}, {"sum_exp", logits, L.features, true}});
  }
  return out;
}

// What the stage mesh's rank 0 (the largest shards: blocks split with the
// remainder first) computes for stage `stage` on a micro-batch of `samples`
// sequences over every replica, the stage's parameters being `parameters`
// (each weight gradient is added into the parameter's accumulated one).
[[nodiscard]] inline stage_work decoder_stage_work(decoder_sizes const& c, mesh_shape const& mesh, std::size_t stage,
                                                   std::size_t samples, std::vector<parameter_spec> const& parameters) {
  transformer_layouts const L(mesh, c.sequence_parallel);
  auto const local = [&](layout const& l, tensor_index const& global) {
    return local_extents(mesh, bind(mesh, l), global, 0);
  };
  tensor_index const rows = local(L.activation, {samples, c.sequence, c.hidden});  // between blocks
  tensor_index const whole = local(L.whole_rows, {samples, c.sequence, c.hidden});
  double const hidden = static_cast<double>(rows[0] * rows[1] * c.hidden);
  std::size_t const b = whole[0], t = whole[0] * whole[1];  // local samples, and their tokens
  std::size_t const heads = local(L.heads_in, {c.hidden, c.heads, c.head_size})[1];
  std::size_t const kv = local(kv_projection_layouts(c, mesh).weight, {c.hidden, c.kv_heads, c.head_size})[1];
  std::size_t const ffn = local(L.column, {c.hidden, c.ffn})[1];
  std::size_t const vocabulary = local(L.features, {samples, c.sequence, c.vocabulary})[2];
  std::vector<kernel_spec> accumulate;
  for (parameter_spec const& p : parameters)
    accumulate.push_back({kernel_kind::add, static_cast<double>(local_elements(mesh, p.placement, p.extents, 0))});
  double const scores = static_cast<double>(b * heads * c.sequence * c.sequence);
  double const tokens = static_cast<double>(t);
  using K = kernel_kind;
  stage_work w;
  if (stage == 0) {  // the lookup of the vocabulary shard (and the positions added); dW: a scatter into the table
    w.forward = {{K::embedding_forward, tokens * static_cast<double>(c.hidden)}};
    w.weight = {{K::fill, static_cast<double>(local(L.vocabulary, {c.vocabulary, c.hidden})[0] * c.hidden)},
                {K::embedding_backward, tokens * static_cast<double>(c.hidden)}};
    if (c.positions) {
      w.forward.push_back({K::add, hidden});
      w.weight.push_back({K::add, hidden});  // the positions' gradient summed over the batch
    }
  } else if (stage <= c.layers) {
    std::size_t const hd = heads * c.head_size, kvd = kv * c.head_size;
    double const features = tokens * static_cast<double>(ffn);
    if (kv == heads)
      w.products = {{3, t, hd, c.hidden, true}};  // q, k, v
    else
      w.products = {{1, t, hd, c.hidden, true}, {2, t, kvd, c.hidden, true}};
    w.products.insert(w.products.end(), {{b * heads, c.sequence, c.sequence, c.head_size, false},  // scores
                                         {b * heads, c.sequence, c.head_size, c.sequence, false},  // weighted values
                                         {1, t, c.hidden, hd, true},                               // o
                                         {c.gated ? 2U : 1U, t, ffn, c.hidden, true},  // w1 (and w3, the gated)
                                         {1, t, c.hidden, ffn, true}});                // w2
    w.forward = {{K::layer_norm_forward, hidden, 2},
                 {K::softmax_forward, scores},
                 {K::gelu_forward, features},        // GELU, or SwiGLU's gating
                 {K::add, hidden, 2}};               // the residuals
    w.input = {{K::layer_norm_backward, hidden, 2},  // residual gradients added inside
               {K::softmax_backward, scores},
               {K::gelu_backward, features}};
    if (c.kv_heads != c.heads) {  // grouped: keys and values copied out per query head, their gradients summed back
      w.forward.push_back({K::add, tokens * static_cast<double>(hd), 2});
      w.input.push_back({K::add, tokens * static_cast<double>(hd), 2});
    }
    if (!c.positions) {  // rotary embeddings of queries and keys, and their transposes
      w.forward.push_back({K::gelu_forward, tokens * static_cast<double>(hd + kvd)});
      w.input.push_back({K::gelu_forward, tokens * static_cast<double>(hd + kvd)});
    }
  } else if (stage == c.layers + 1) {
    w.products = {{1, t, vocabulary, c.hidden, true}};
    w.forward = {{K::layer_norm_forward, hidden}};
    w.input = {{K::layer_norm_backward, hidden}};
  } else {
    w.forward = {{K::cross_entropy_forward, tokens * static_cast<double>(vocabulary)}};
    w.input = {{K::cross_entropy_backward, tokens * static_cast<double>(vocabulary)}};
  }
  w.weight.insert(w.weight.end(), accumulate.begin(), accumulate.end());
  return w;
}

// The redistributions of stage `stage` on a stage mesh (dp and tp axes; dp
// may be absent) for a micro-batch of `samples` sequences (over every
// data-parallel replica). Megatron's, read off the layers' layouts: a
// row-parallel or vocabulary-parallel output P(sum:tp) reduced into the
// activation layout (all-reduce; reduce-scatter onto the sequence with
// sequence parallelism, whose activations are all-gathered back before
// each column-parallel input and their gradients likewise); the loss's
// three row reductions over the vocabulary shards and its sum over the
// replicas; with sequence parallelism, the norms' gain (and bias)
// gradients summed over the sequence shards and the position table's
// gathered; key/value projections held whole by every rank have their
// weight gradients summed over tp. The token table's gradient is planned
// as the embedding plans it (plan_product: gather dX, or reduce the
// table's gradient, whichever moves less). Weight gradients stay partial
// on dp (the data-parallel reduction is the trainer's, per bucket).
[[nodiscard]] inline std::vector<transition_spec> decoder_stage_transitions(decoder_sizes const& c,
                                                                            mesh_shape const& mesh, std::size_t stage,
                                                                            std::size_t samples) {
  transformer_layouts const L(mesh, c.sequence_parallel);
  bool const dp = mesh.find("dp") != npos, sp = c.sequence_parallel;
  auto const b = [&](layout const& l) { return bind(mesh, l); };
  auto const on_tp = [&](layout const& l, reduce_op op = reduce_op::sum) { return b(l.partial(op, "tp")); };
  // A weight gradient's layout: partial on dp (the batch) as the trainer accumulates it.
  auto const gradient = [&](layout const& l) { return b(dp ? l.partial(reduce_op::sum, "dp") : l); };
  auto const gradient_on_tp = [&](layout const& l) {
    return b((dp ? l.partial(reduce_op::sum, "dp") : l).partial(reduce_op::sum, "tp"));
  };
  std::vector<std::size_t> const act{samples, c.sequence, c.hidden}, rows{samples, c.sequence};
  std::vector<std::size_t> const vector{c.hidden}, positions{c.sequence, c.hidden};
  transition_spec const reduce{false, act, on_tp(L.whole_rows), b(L.activation)};
  transition_spec const reduce_gradient{true, act, on_tp(L.whole_rows), b(L.activation)};
  std::size_t const vectors_per_norm = c.centred ? 2 : 1;  // gain (and bias)
  std::vector<transition_spec> out;
  if (stage == 0) {
    out.push_back(reduce);  // the vocabulary-parallel lookup
    // The token table's gradient, onehot^T dX, as embedding.hpp plans it.
    op_layouts const plan = plan_table_gradient(mesh, b(L.ids), b(L.activation), {samples, c.sequence, c.vocabulary},
                                                {samples, c.sequence, c.hidden}, gradient(L.vocabulary));
    bound_layout const ids_rows = table_gradient_ids(plan);
    out.push_back({true, rows, b(L.ids), ids_rows, sizeof(int)});
    out.push_back({true, act, b(L.activation), plan.b});
    out.push_back({true, {c.vocabulary, c.hidden}, plan.c, gradient(L.vocabulary)});
    if (c.positions) {  // the position table's: dX summed over the batch, in dX's placement of the sequence
      bound_layout summed = b(L.activation);
      summed.rank = 2;
      summed.dims[0] = summed.dims[1];
      summed.dims[1] = summed.dims[2];
      out.push_back({true, positions, gradient(unbind(mesh, summed)), gradient(L.matrix)});
    }
  } else if (stage <= c.layers) {
    for (bool in_backward : {false, true})
      for (int branch = 0; branch < 2; ++branch) {  // attention, then the MLP
        if (sp) out.push_back({in_backward, act, b(L.activation), b(L.whole_rows)});
        out.push_back(in_backward ? reduce_gradient : reduce);
      }
    if (sp)
      for (std::size_t v = 0; v < 2 * vectors_per_norm; ++v)
        out.push_back({true, vector, gradient_on_tp(L.vector), gradient(L.vector)});
    layout const kv = kv_projection_layouts(c, mesh).weight;
    if (kv != L.heads_in)  // wk and wv held whole: their gradients are partial on tp
      for (int w = 0; w < 2; ++w)
        out.push_back({true, {c.hidden, c.kv_heads, c.head_size}, gradient_on_tp(kv), gradient(kv)});
  } else if (stage == c.layers + 1) {
    if (sp) out.push_back({false, act, b(L.activation), b(L.whole_rows)});
    out.push_back(reduce_gradient);  // the head's input gradient
    if (sp)
      for (std::size_t v = 0; v < vectors_per_norm; ++v)
        out.push_back({true, vector, gradient_on_tp(L.vector), gradient(L.vector)});
  } else {
    out.push_back({false, rows, on_tp(L.ids, reduce_op::max), b(L.ids)});  // the largest logit
    out.push_back({false, rows, on_tp(L.ids), b(L.ids)});                  // the sum of exponentials
    out.push_back({false, rows, on_tp(L.ids), b(L.ids)});                  // the target's logit
    if (dp)  // the loss and the rows that count, summed over the replicas (two doubles)
      out.push_back(
          {false, {2}, b(layout{replicated}.partial(reduce_op::sum, "dp")), b(layout{replicated}), sizeof(double)});
  }
  return out;
}

// A decoder as the planner sees it; an architecture says which parameters each stage declares.
class decoder_description : public model_description {
 public:
  explicit decoder_description(decoder_sizes const& sizes) : sizes_(sizes) {}

  [[nodiscard]] decoder_sizes const& sizes() const { return sizes_; }
  [[nodiscard]] std::size_t blocks() const override { return sizes_.layers; }
  [[nodiscard]] std::vector<stage_description> stages(mesh_shape const& mesh, std::size_t samples) const override {
    std::size_t const L = sizes_.layers;
    std::vector<stage_description> out;
    for (std::size_t s = 0; s < L + 3; ++s) {
      std::vector<parameter_spec> parameters = stage_parameters(mesh, s);
      stage_work work = decoder_stage_work(sizes_, mesh, s, samples, parameters);
      out.push_back({decoder_stage_name(L, s), decoder_stage_place(L, s), decoder_stage_kind(L, s),
                     std::move(parameters), decoder_stage_saved(sizes_, mesh, s, samples), std::move(work),
                     decoder_stage_transitions(sizes_, mesh, s, samples)});
    }
    return out;
  }
  [[nodiscard]] boundary_spec boundary(mesh_shape const& mesh, std::size_t samples) const override {
    return {{samples, sizes_.sequence, sizes_.hidden}, transformer_layouts(mesh, sizes_.sequence_parallel).activation};
  }
  [[nodiscard]] std::string tensor_parallel_error(std::size_t tp) const override {
    if (tp > sizes_.heads)
      return "tp = " + std::to_string(tp) + " is more than the " + std::to_string(sizes_.heads) + " heads";
    return {};
  }

 protected:
  // The parameters stage `stage` declares on `mesh`.
  [[nodiscard]] virtual std::vector<parameter_spec> stage_parameters(mesh_shape const& mesh,
                                                                     std::size_t stage) const = 0;

 private:
  decoder_sizes sizes_;
};

}  // namespace shardmesh::parallel
