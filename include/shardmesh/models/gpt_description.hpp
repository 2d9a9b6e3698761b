#pragma once
// What the small GPT is made of, declared once: for each of its stages
// (0 the embedding, 1 to L the blocks, L+1 the final norm and head, L+2 the
// loss; gpt.hpp builds its parameters from these declarations and numbers
// its stages alike) the parameters it holds (name, global extents, and the
// transformer layout that places them), what its forward keeps for its
// backward, the local products and kernels a rank makes for it per
// micro-batch (stage_work.hpp: shapes read off the same layouts), and the
// redistributions it plans. gpt_description hands them to the planner
// (model_description.hpp): the pipeline partition weighs stages by their
// flops, and the memory and time models size memory, compute and
// communication from them rather than from formulas of their own.
//
// Flops count the products (2 per multiply-add): the projections, the
// attention scores and weighted values over the whole sequence (causal
// masking does not skip them), the MLP and the head; a backward product
// costs twice its forward (the input gradient and the weight gradient).
// Elementwise and row kernels (layer norms, softmax, GELU, residuals, the
// loss, the embedding's lookup and scatter) are declared by kind and
// element count: they are memory- or transcendental-bound, and their time
// is what the planner's calibrated kernel rates are for.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/contraction.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/plan/stage_work.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace shardmesh::parallel {

struct gpt_config {
  std::size_t vocabulary = 0, sequence = 0, hidden = 0, heads = 0, head_size = 0, ffn = 0, layers = 0;
  double eps = 1e-5;
  bool sequence_parallel = false;
};

// The GPT's stages: 0 "embedding", 1 to L the blocks "h0" ..., L + 1
// "head" (the final norm and the head), L + 2 "loss".
[[nodiscard]] inline std::string gpt_stage_name(gpt_config const& c, std::size_t stage) {
  if (stage == 0) return "embedding";
  if (stage <= c.layers) return "h" + std::to_string(stage - 1);
  return stage == c.layers + 1 ? "head" : "loss";
}

// Which calibrated overhead stage `stage` pays (hardware_model.hpp).
[[nodiscard]] constexpr stage_kind gpt_stage_kind(gpt_config const& c, std::size_t stage) {
  if (stage == 0) return stage_kind::embedding;
  if (stage <= c.layers) return stage_kind::block;
  return stage == c.layers + 1 ? stage_kind::head : stage_kind::loss;
}

// The parameters of stage `stage`, placed on `mesh` by the transformer layouts.
[[nodiscard]] inline std::vector<parameter_spec> gpt_stage_parameters(gpt_config const& c, mesh_shape const& mesh,
                                                                      std::size_t stage) {
  transformer_layouts const L(mesh, c.sequence_parallel);
  if (stage == 0) return {{"wte", {c.vocabulary, c.hidden}, L.vocabulary}, {"wpe", {c.sequence, c.hidden}, L.matrix}};
  if (stage <= c.layers) {
    std::string const h = "h" + std::to_string(stage - 1) + ".";
    return {{h + "ln1_g", {c.hidden}, L.vector},
            {h + "ln1_b", {c.hidden}, L.vector},
            {h + "wq", {c.hidden, c.heads, c.head_size}, L.heads_in},
            {h + "wk", {c.hidden, c.heads, c.head_size}, L.heads_in},
            {h + "wv", {c.hidden, c.heads, c.head_size}, L.heads_in},
            {h + "wo", {c.heads, c.head_size, c.hidden}, L.heads_out},
            {h + "ln2_g", {c.hidden}, L.vector},
            {h + "ln2_b", {c.hidden}, L.vector},
            {h + "w1", {c.hidden, c.ffn}, L.column},
            {h + "w2", {c.ffn, c.hidden}, L.row}};
  }
  if (stage == c.layers + 1)
    return {{"lnf_g", {c.hidden}, L.vector},
            {"lnf_b", {c.hidden}, L.vector},
            {"whead", {c.hidden, c.vocabulary}, L.column}};
  return {};
}

// What stage `stage` of the GPT keeps per micro-batch of `samples`
// sequences (over every replica), as gpt.hpp's layers save it.
[[nodiscard]] inline std::vector<saved_spec> gpt_stage_saved(gpt_config const& c, mesh_shape const& mesh,
                                                             std::size_t stage, std::size_t samples) {
  transformer_layouts const L(mesh, c.sequence_parallel);
  std::vector<std::size_t> const act{samples, c.sequence, c.hidden};
  std::vector<std::size_t> const heads{samples, c.sequence, c.heads, c.head_size};
  std::vector<std::size_t> const ffn{samples, c.sequence, c.ffn};
  // A layer norm keeps its input, each row's mean and 1/std; the linear layer after it, its output with the
  // sequence whole (the same tensor without sequence parallelism).
  auto const norm = [&](std::string const& name, std::string const& next) {
    return std::vector<saved_spec>{{name + ".x", act, L.activation},
                                   {name + ".mean", act, L.activation, true},
                                   {name + ".rstd", act, L.activation, true},
                                   {next + ".x", act, L.whole_rows}};
  };
  std::vector<saved_spec> out;
  auto const append = [&](std::vector<saved_spec> more) { out.insert(out.end(), more.begin(), more.end()); };
  if (stage >= 1 && stage <= c.layers) {
    append(norm("ln1", "qkv"));
    append({{"query", heads, L.heads},
            {"key", heads, L.heads},
            {"value", heads, L.heads},
            {"probabilities", {samples, c.heads, c.sequence, c.sequence}, L.scores},
            {"o.x", heads, L.heads}});  // the weighted values
    append(norm("ln2", "w1"));
    append({{"hidden", ffn, L.features}, {"w2.x", ffn, L.features}});  // before and after GELU
  } else if (stage == c.layers + 1) {
    append(norm("lnf", "whead"));
  } else if (stage == c.layers + 2) {
    std::vector<std::size_t> const logits{samples, c.sequence, c.vocabulary};
    append({{"logits", logits, L.features}, {"max", logits, L.features, true}, {"sum_exp", logits, L.features, true}});
  }
  return out;
}

// What the stage mesh's rank 0 (the largest shards: blocks split with the
// remainder first) computes for stage `stage` of the GPT on a micro-batch of
// `samples` sequences over every replica: the layers' products and kernels,
// shapes read off the transformer layouts (gpt.hpp, attention.hpp, mlp.hpp,
// embedding.hpp make them in this order).
[[nodiscard]] inline stage_work gpt_stage_work(gpt_config const& c, mesh_shape const& mesh, std::size_t stage,
                                               std::size_t samples) {
  transformer_layouts const L(mesh, c.sequence_parallel);
  auto const local = [&](layout const& l, tensor_index const& global) {
    return local_extents(mesh, bind(mesh, l), global, 0);
  };
  tensor_index const rows = local(L.activation, {samples, c.sequence, c.hidden});  // between blocks
  tensor_index const whole = local(L.whole_rows, {samples, c.sequence, c.hidden});
  double const hidden = static_cast<double>(rows[0] * rows[1] * c.hidden);
  std::size_t const b = whole[0], t = whole[0] * whole[1];  // local samples, and their tokens
  std::size_t const heads = local(L.heads_in, {c.hidden, c.heads, c.head_size})[1];
  std::size_t const ffn = local(L.column, {c.hidden, c.ffn})[1];
  std::size_t const vocabulary = local(L.features, {samples, c.sequence, c.vocabulary})[2];
  // Each weight gradient is added into the parameter's accumulated one.
  std::vector<kernel_spec> accumulate;
  for (parameter_spec const& p : gpt_stage_parameters(c, mesh, stage))
    accumulate.push_back({kernel_kind::add, static_cast<double>(local_elements(mesh, p.placement, p.extents, 0))});
  double const scores = static_cast<double>(b * heads * c.sequence * c.sequence);
  double const tokens = static_cast<double>(t);
  using K = kernel_kind;
  stage_work w;
  if (stage == 0) {  // the lookup of the vocabulary shard and the positions added; dW: a scatter into the table
    w.forward = {{K::embedding_forward, tokens * static_cast<double>(c.hidden)}, {K::add, hidden}};
    w.weight = {{K::fill, static_cast<double>(local(L.vocabulary, {c.vocabulary, c.hidden})[0] * c.hidden)},
                {K::embedding_backward, tokens * static_cast<double>(c.hidden)},
                {K::add, hidden}};  // the positions' gradient summed over the batch
  } else if (stage <= c.layers) {
    std::size_t const hd = heads * c.head_size;
    w.products = {{3, t, hd, c.hidden, true},                               // q, k, v
                  {b * heads, c.sequence, c.sequence, c.head_size, false},  // scores
                  {b * heads, c.sequence, c.head_size, c.sequence, false},  // weighted values
                  {1, t, c.hidden, hd, true},                               // o
                  {1, t, ffn, c.hidden, true},                              // w1
                  {1, t, c.hidden, ffn, true}};                             // w2
    w.forward = {{K::layer_norm_forward, hidden, 2},
                 {K::softmax_forward, scores},
                 {K::gelu_forward, tokens * static_cast<double>(ffn)},
                 {K::add, hidden, 2}};               // the residuals
    w.input = {{K::layer_norm_backward, hidden, 2},  // residual gradients added inside
               {K::softmax_backward, scores},
               {K::gelu_backward, tokens * static_cast<double>(ffn)}};
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

// The redistributions of stage `stage` of the GPT on a stage mesh (dp and
// tp axes; dp may be absent) for a micro-batch of `samples` sequences (over
// every data-parallel replica). Megatron's, read off the layers' layouts:
// a row-parallel or vocabulary-parallel output P(sum:tp) reduced into the
// activation layout (all-reduce; reduce-scatter onto the sequence with
// sequence parallelism, whose activations are all-gathered back before
// each column-parallel input and their gradients likewise); the loss's
// three row reductions over the vocabulary shards and its sum over the
// replicas; with sequence parallelism, the layer norms' gain and bias
// gradients summed over the sequence shards and the position table's
// gathered. The token table's gradient is planned as the embedding plans
// it (plan_product: gather dX, or reduce the table's gradient, whichever
// moves less). Weight gradients stay partial on dp (the data-parallel
// reduction is the trainer's, per bucket).
[[nodiscard]] inline std::vector<transition_spec> gpt_stage_transitions(gpt_config const& c, mesh_shape const& mesh,
                                                                        std::size_t stage, std::size_t samples) {
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
  std::vector<transition_spec> out;
  if (stage == 0) {
    out.push_back(reduce);  // the vocabulary-parallel lookup
    // The token table's gradient, onehot^T dX, as embedding.hpp plans it.
    static constexpr contraction table_gradient = parse_contraction("btv,btc->vc");
    bound_layout onehot = b(L.ids);
    onehot.rank = 3;
    onehot.dims[2] = bound_dim{};
    bound_layout const want = gradient(L.vocabulary);
    std::array<std::size_t, 3> const eo{samples, c.sequence, c.vocabulary}, ex{samples, c.sequence, c.hidden};
    op_layouts const plan = plan_product(mesh, table_gradient, onehot, b(L.activation), eo, ex, &want);
    bound_layout ids_rows = plan.a;
    ids_rows.rank = 2;
    ids_rows.partial_axes = {};
    out.push_back({true, rows, b(L.ids), ids_rows, sizeof(int)});
    out.push_back({true, act, b(L.activation), plan.b});
    out.push_back({true, {c.vocabulary, c.hidden}, plan.c, want});
    // The position table's: dX summed over the batch, in dX's placement of the sequence.
    bound_layout summed = b(L.activation);
    summed.rank = 2;
    summed.dims[0] = summed.dims[1];
    summed.dims[1] = summed.dims[2];
    out.push_back({true, positions, gradient(unbind(mesh, summed)), gradient(L.matrix)});
  } else if (stage <= c.layers) {
    for (bool in_backward : {false, true})
      for (int branch = 0; branch < 2; ++branch) {  // attention, then the MLP
        if (sp) out.push_back({in_backward, act, b(L.activation), b(L.whole_rows)});
        out.push_back(in_backward ? reduce_gradient : reduce);
      }
    if (sp)
      for (int ln = 0; ln < 4; ++ln) out.push_back({true, vector, gradient_on_tp(L.vector), gradient(L.vector)});
  } else if (stage == c.layers + 1) {
    if (sp) out.push_back({false, act, b(L.activation), b(L.whole_rows)});
    out.push_back(reduce_gradient);  // the head's input gradient
    if (sp)
      for (int ln = 0; ln < 2; ++ln) out.push_back({true, vector, gradient_on_tp(L.vector), gradient(L.vector)});
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

// Every parameter of a gpt of configuration c: its name and global extents,
// in for_each_parameter's order (for initialising a model, or sizing one).
[[nodiscard]] inline std::vector<parameter_spec> gpt_parameters(gpt_config const& c) {
  std::vector<parameter_spec> out;
  for (std::size_t s = 0; s < c.layers + 3; ++s) {
    std::vector<parameter_spec> const more = gpt_stage_parameters(c, mesh_shape{{"tp", 1}}, s);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

// The GPT as the planner sees it (model_description.hpp).
class gpt_description final : public model_description {
 public:
  explicit gpt_description(gpt_config const& c) : config_(c) {}

  [[nodiscard]] gpt_config const& config() const { return config_; }
  [[nodiscard]] std::size_t blocks() const override { return config_.layers; }
  [[nodiscard]] std::vector<stage_description> stages(mesh_shape const& mesh, std::size_t samples) const override {
    std::size_t const L = config_.layers;
    std::vector<stage_description> out;
    for (std::size_t s = 0; s < L + 3; ++s) {
      stage_place const place = s == 0 ? stage_place::first : s <= L ? stage_place::block : stage_place::last;
      out.push_back({gpt_stage_name(config_, s), place, gpt_stage_kind(config_, s),
                     gpt_stage_parameters(config_, mesh, s), gpt_stage_saved(config_, mesh, s, samples),
                     gpt_stage_work(config_, mesh, s, samples), gpt_stage_transitions(config_, mesh, s, samples)});
    }
    return out;
  }
  [[nodiscard]] boundary_spec boundary(mesh_shape const& mesh, std::size_t samples) const override {
    return {{samples, config_.sequence, config_.hidden},
            transformer_layouts(mesh, config_.sequence_parallel).activation};
  }
  [[nodiscard]] std::string tensor_parallel_error(std::size_t tp) const override {
    if (tp > config_.heads)
      return "tp = " + std::to_string(tp) + " is more than the " + std::to_string(config_.heads) + " heads";
    return {};
  }

 private:
  gpt_config config_;
};

}  // namespace shardmesh::parallel
