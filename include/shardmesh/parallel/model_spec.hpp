#pragma once
// What the small GPT is made of, declared once: for each of its stages
// (0 the embedding, 1 to L the blocks, L+1 the final norm and head, L+2 the
// loss; gpt.hpp numbers them alike) the parameters it holds (name, global
// extents, and which of the transformer layouts places them) and the flops
// of its forward and backward per sample. The model builds its parameters
// from the same names, extents and layouts (a test checks each against the
// constructed model on several meshes); the pipeline partition weighs
// stages by these flops, and the training planner sizes memory and compute
// from them rather than from formulas of its own.
//
// Flops count the products (2 per multiply-add): the projections, the
// attention scores and weighted values over the whole sequence (causal
// masking does not skip them), the MLP and the head; a backward product
// costs twice its forward (the input gradient and the weight gradient).
// Elementwise work (layer norms, softmax, GELU, residuals) is left out of
// the flops: it is memory-bound, and its time is what the planner's
// bandwidth terms are for.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/contraction.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/parallel/layer_partition.hpp"
#include "shardmesh/parallel/layouts.hpp"

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

// One parameter: its name ("wte", "h0.wq", ...), global extents, and the
// member of transformer_layouts that places it on a mesh.
struct parameter_spec {
  std::string name;
  std::vector<std::size_t> extents;
  layout transformer_layouts::* placement = nullptr;

  [[nodiscard]] std::size_t elements() const {
    std::size_t n = 1;
    for (std::size_t e : extents) n *= e;
    return n;
  }
};

struct stage_spec {
  std::string name;  // "embedding", "h0", ..., "head", "loss"
  std::vector<parameter_spec> parameters;
  double forward_flops = 0;   // per sample (one sequence), the whole stage unsharded
  double backward_flops = 0;  // the same for its backward (input and weight gradients)
  // Elements its elementwise kernels read and write per sample in the
  // forward (the backward: about twice as many): those split among the tp
  // ranks (heads, features, vocabulary), and those of the hidden size,
  // whole on every tp rank unless sequence parallelism splits them too.
  double elementwise_sharded = 0;
  double elementwise_replicated = 0;
};

// Every stage of a GPT of configuration c, in forward order.
[[nodiscard]] inline std::vector<stage_spec> gpt_stage_specs(gpt_config const& c) {
  using L = transformer_layouts;
  double const T = static_cast<double>(c.sequence), C = static_cast<double>(c.hidden);
  double const HD = static_cast<double>(c.heads * c.head_size), F = static_cast<double>(c.ffn);
  double const V = static_cast<double>(c.vocabulary);
  std::vector<stage_spec> stages;
  // The embedding's forward is a lookup and an addition (no products); its
  // backward scatters the gradient into the table.
  // Per token: the lookup written and the positions added (4 C); a
  // block's two layer norms (2 C each) and residual additions (3 C each),
  // its softmax over the scores (2 H T) and GELU (2 F); the final layer
  // norm; the loss's softmax over the vocabulary (3 V).
  stages.push_back({"embedding",
                    {{"wte", {c.vocabulary, c.hidden}, &L::vocabulary}, {"wpe", {c.sequence, c.hidden}, &L::matrix}},
                    0,
                    0,
                    0,
                    T * 4 * C});
  double const block = T * (2 * (3 * C * HD + HD * C) + 2 * 2 * T * HD + 2 * 2 * C * F);
  for (std::size_t l = 0; l < c.layers; ++l) {
    std::string const h = "h" + std::to_string(l) + ".";
    stages.push_back({"h" + std::to_string(l),
                      {{h + "ln1_g", {c.hidden}, &L::vector},
                       {h + "ln1_b", {c.hidden}, &L::vector},
                       {h + "wq", {c.hidden, c.heads, c.head_size}, &L::heads_in},
                       {h + "wk", {c.hidden, c.heads, c.head_size}, &L::heads_in},
                       {h + "wv", {c.hidden, c.heads, c.head_size}, &L::heads_in},
                       {h + "wo", {c.heads, c.head_size, c.hidden}, &L::heads_out},
                       {h + "ln2_g", {c.hidden}, &L::vector},
                       {h + "ln2_b", {c.hidden}, &L::vector},
                       {h + "w1", {c.hidden, c.ffn}, &L::column},
                       {h + "w2", {c.ffn, c.hidden}, &L::row}},
                      block,
                      2 * block,
                      T * (2 * static_cast<double>(c.heads) * T + 2 * F),
                      T * 10 * C});
  }
  double const head = T * 2 * C * V;
  stages.push_back({"head",
                    {{"lnf_g", {c.hidden}, &L::vector},
                     {"lnf_b", {c.hidden}, &L::vector},
                     {"whead", {c.hidden, c.vocabulary}, &L::column}},
                    head,
                    2 * head,
                    0,
                    T * 2 * C});
  stages.push_back({"loss", {}, 0, 0, T * 3 * V, 0});
  return stages;
}

// A redistribution a stage makes per micro-batch, in its forward or its
// backward: a tensor of global extents `extents` moved from layout `from`
// to layout `to` on the stage mesh. The algebra plans it, so its collectives
// and bytes are the plan's (communication_model.hpp).
struct transition_spec {
  bool in_backward = false;
  std::vector<std::size_t> extents;
  bound_layout from, to;
  std::size_t element_bytes = 0;  // 0: the model's element type
};

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
struct parameter_shape {
  std::string name;
  std::vector<std::size_t> extents;
};
[[nodiscard]] inline std::vector<parameter_shape> gpt_parameter_shapes(gpt_config const& c) {
  std::vector<parameter_shape> out;
  for (stage_spec const& s : gpt_stage_specs(c))
    for (parameter_spec const& p : s.parameters) out.push_back({p.name, p.extents});
  return out;
}

// Forward flops per token of a block, the embedding and the head: what a
// balanced pipeline partition weighs (partition_layers).
[[nodiscard]] inline layer_costs gpt_layer_costs(gpt_config const& c) {
  std::vector<stage_spec> const stages = gpt_stage_specs(c);
  double const tokens = static_cast<double>(std::max<std::size_t>(c.sequence, 1));
  double const block = c.layers > 0 ? stages[1].forward_flops / tokens : 0;
  return {block, stages.front().forward_flops / tokens, stages[c.layers + 1].forward_flops / tokens};
}

}  // namespace shardmesh::parallel
