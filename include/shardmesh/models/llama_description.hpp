#pragma once
// What a Llama-style decoder is made of, declared once (llama.hpp builds
// its parameters from these declarations): token embeddings without
// positions, blocks of RMS norm, attention with rotary position embeddings
// and grouped-query key/value heads, RMS norm and a SwiGLU MLP, a final
// RMS norm and an untied head. Its stages are numbered as the GPT's: 0
// "embedding", 1 to L the blocks "h0" ..., L + 1 "head", L + 2 "loss".
//
// The key/value projections are split on tp like the queries where each
// rank's query heads then read only its own key/value heads (as many
// key/value heads as query heads, or tp dividing them), and held whole by
// every rank otherwise (kv_projection_layouts, nn/attention.hpp).
// With experts (llama_experts), every `every`-th block (h1, h3, ... for
// every = 2) has a mixture of experts in place of its SwiGLU MLP: a router
// [C, E] held whole and experts' GELU MLPs [E, C, F], [E, F, C] split on
// the mesh's "ep" axis (nn/mixture_of_experts.hpp); the batch is then split
// on ep as well as dp (transformer_layouts.hpp).
//
// llama_description hands the declarations, with what
// decoder_description.hpp reads off the same layouts, to the planner.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/sequence_chunks.hpp"
#include "shardmesh/models/decoder_description.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/strategy/recomputation.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

// A mixture of experts in some blocks (none while count is 0).
struct llama_experts {
  std::size_t count = 0;  // E, the experts per mixture
  std::size_t every = 2;  // in blocks every - 1, 2 every - 1, ...
  std::size_t top_k = 2;  // the experts each token goes to
  double capacity = 0;    // the capacity factor (0: dropless)
  double balance = 0.01;  // the load-balancing loss's weight
  double z_loss = 0;      // the router z-loss's weight
};

struct llama_config {
  std::size_t vocabulary = 0, sequence = 0, hidden = 0, heads = 0, kv_heads = 0, head_size = 0, ffn = 0, layers = 0;
  double eps = 1e-5;
  double rope_base = 10000;
  bool sequence_parallel = false;
  recompute_mode recompute = recompute_mode::none;  // activation recomputation per block
  context_form context = context_form::ring;        // attention's form on a mesh with a "cp" axis
  llama_experts experts = {};
};

// What is wrong with c, naming the field; empty if nothing.
[[nodiscard]] inline std::string llama_config_error(llama_config const& c) {
  if (std::string why = zero_size_error({{"vocabulary", c.vocabulary},
                                         {"sequence", c.sequence},
                                         {"hidden", c.hidden},
                                         {"heads", c.heads},
                                         {"kv_heads", c.kv_heads},
                                         {"head_size", c.head_size},
                                         {"ffn", c.ffn},
                                         {"layers", c.layers}});
      !why.empty())
    return why;
  if (c.heads % c.kv_heads != 0)
    return "kv_heads = " + std::to_string(c.kv_heads) + " does not divide heads = " + std::to_string(c.heads);
  if (c.head_size % 2 != 0)
    return "head_size = " + std::to_string(c.head_size) + " is odd: rotary embeddings rotate pairs";
  if (!(c.rope_base > 1)) return "rope_base = " + std::to_string(c.rope_base) + " is not above 1";
  if (!(c.eps > 0)) return "eps = " + std::to_string(c.eps) + " is not above 0";
  if (llama_experts const& e = c.experts; e.count > 0) {
    if (e.every == 0) return "experts.every = 0: a mixture every 0th block";
    if (e.top_k == 0 || e.top_k > 2 || e.top_k > e.count)
      return "experts.top_k = " + std::to_string(e.top_k) + ": each token goes to 1 or 2 of the " +
             std::to_string(e.count) + " experts";
    if (!(e.capacity >= 0)) return "experts.capacity = " + std::to_string(e.capacity) + " is below 0";
    if (!(e.balance >= 0) || !(e.z_loss >= 0)) return "experts.balance and experts.z_loss must be at least 0";
  }
  return {};
}

// The facts of the model the planner reads (decoder_description.hpp).
[[nodiscard]] inline decoder_sizes llama_sizes(llama_config const& c) {
  decoder_sizes s{c.vocabulary, c.sequence,          c.hidden, c.heads, c.kv_heads, c.head_size, c.ffn,
                  c.layers,     c.sequence_parallel, false,    false,   true};
  if (c.experts.count > 0) {
    s.experts = c.experts.count;
    s.top_k = c.experts.top_k;
    s.expert_every = c.experts.every;
  }
  s.context = c.context;
  return s;
}

// The parameters of stage `stage`, placed on `mesh`.
[[nodiscard]] inline std::vector<parameter_spec> llama_stage_parameters(llama_config const& c, mesh_shape const& mesh,
                                                                        std::size_t stage) {
  transformer_layouts const L(mesh, c.sequence_parallel);
  if (stage == 0) return {{"wte", {c.vocabulary, c.hidden}, L.vocabulary}};
  if (stage <= c.layers) {
    std::string const h = "h" + std::to_string(stage - 1) + ".";
    layout const kv = kv_projection_layouts(llama_sizes(c), mesh).weight;
    std::vector<parameter_spec> out{{h + "ln1_g", {c.hidden}, L.vector},
                                    {h + "wq", {c.hidden, c.heads, c.head_size}, L.heads_in},
                                    {h + "wk", {c.hidden, c.kv_heads, c.head_size}, kv},
                                    {h + "wv", {c.hidden, c.kv_heads, c.head_size}, kv},
                                    {h + "wo", {c.heads, c.head_size, c.hidden}, L.heads_out},
                                    {h + "ln2_g", {c.hidden}, L.vector}};
    if (llama_sizes(c).experts_in(stage - 1)) {
      std::size_t const E = c.experts.count;
      out.insert(out.end(), {{h + "router", {c.hidden, E}, L.matrix},
                             {h + "experts_up", {E, c.hidden, c.ffn}, L.experts},
                             {h + "experts_down", {E, c.ffn, c.hidden}, L.experts}});
    } else {
      out.insert(out.end(), {{h + "w1", {c.hidden, c.ffn}, L.column},
                             {h + "w3", {c.hidden, c.ffn}, L.column},
                             {h + "w2", {c.ffn, c.hidden}, L.row}});
    }
    return out;
  }
  if (stage == c.layers + 1) return {{"lnf_g", {c.hidden}, L.vector}, {"whead", {c.hidden, c.vocabulary}, L.column}};
  return {};
}

// Every parameter of a Llama-style model of configuration c, in its stages' order.
[[nodiscard]] inline std::vector<parameter_spec> llama_parameters(llama_config const& c) {
  std::vector<parameter_spec> out;
  for (std::size_t s = 0; s < c.layers + 3; ++s) {
    std::vector<parameter_spec> const more = llama_stage_parameters(c, mesh_shape{{"tp", 1}}, s);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

// The model as the planner sees it (model_description.hpp).
class llama_description final : public decoder_description {
 public:
  explicit llama_description(llama_config const& c) : decoder_description(llama_sizes(c)), config_(c) {}

  [[nodiscard]] llama_config const& config() const { return config_; }

 protected:
  [[nodiscard]] std::vector<parameter_spec> stage_parameters(mesh_shape const& mesh, std::size_t stage) const override {
    return llama_stage_parameters(config_, mesh, stage);
  }

 private:
  llama_config config_;
};

}  // namespace shardmesh::parallel
