#pragma once
// A decoder-only model (models/decoder.hpp) as the planner sees it: each
// stage is the sum of the declarations of the layers it holds
// (plan/layer_declarations.hpp), for the GPT and the Llama-style model
// alike. The two differ in a few facts (decoder_sizes): learned positions
// or none (rotary embeddings), layer norms or RMS norms, a GELU or a gated
// (SwiGLU) MLP, and fewer key/value heads than query heads. Each
// architecture declares its parameters (gpt_description.hpp,
// llama_description.hpp); the rest is read from those facts.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/sequence_chunks.hpp"
#include "shardmesh/models/decoder_stages.hpp"
#include "shardmesh/plan/layer_declarations.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

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
  std::size_t experts = 0, top_k = 0, expert_every = 0;  // a mixture of experts in blocks every - 1, 2 every - 1, ...
  context_form context = context_form::ring;             // attention's form with a "cp" axis

  [[nodiscard]] bool experts_in(std::size_t block) const { return experts > 0 && (block + 1) % expert_every == 0; }
};

// "name is 0" for the first size that is 0, or nothing: a config's check of its sizes.
[[nodiscard]] inline std::string zero_size_error(std::initializer_list<std::pair<char const*, std::size_t>> sizes) {
  for (auto const& [name, value] : sizes)
    if (value == 0) return std::string(name) + " is 0";
  return {};
}

// The key/value projections' layouts of a decoder (plan/layer_declarations.hpp).
[[nodiscard]] inline kv_layouts kv_projection_layouts(decoder_sizes const& c, mesh_shape const& mesh) {
  return kv_projection_layouts(c.heads, c.kv_heads, mesh, c.sequence_parallel);
}

// The layers stage `stage` of a decoder holds, declared at `at`.
[[nodiscard]] inline stage_declaration decoder_stage_layers(decoder_sizes const& c, layer_site const& at,
                                                            std::size_t stage) {
  if (stage == 0) return declare_embedding(at, c.vocabulary, c.positions);
  if (stage <= c.layers) {
    stage_declaration d = declare_norm(at, "ln1", c.centred);
    d += declare_attention(at, {c.heads, c.kv_heads, c.head_size, !c.positions, c.context});
    d += declare_residual(at);
    d += declare_norm(at, "ln2", c.centred);
    d += c.experts_in(stage - 1) ? declare_experts(at, c.experts, c.top_k, c.ffn) : declare_mlp(at, c.ffn, c.gated);
    d += declare_residual(at);
    return d;
  }
  if (stage == c.layers + 1) {
    stage_declaration d = declare_norm(at, "lnf", c.centred);
    d += declare_head(at, c.vocabulary);
    return d;
  }
  return declare_loss(at, c.vocabulary);
}

// A decoder as the planner sees it; an architecture says which parameters each stage declares.
class decoder_description : public model_description {
 public:
  explicit decoder_description(decoder_sizes const& sizes) : sizes_(sizes) {}

  [[nodiscard]] decoder_sizes const& sizes() const { return sizes_; }
  [[nodiscard]] std::size_t blocks() const override { return sizes_.layers; }
  [[nodiscard]] std::vector<stage_description> stages(mesh_shape const& mesh, std::size_t samples) const override {
    std::size_t const L = sizes_.layers;
    layer_site const at(mesh, sizes_.sequence_parallel, samples, sizes_.sequence, sizes_.hidden);
    std::vector<stage_description> out;
    for (std::size_t s = 0; s < L + 3; ++s)
      out.push_back(declared_stage(at, decoder_stage_name(L, s), decoder_stage_place(L, s), decoder_stage_kind(L, s),
                                   stage_parameters(mesh, s), decoder_stage_layers(sizes_, at, s)));
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
  [[nodiscard]] std::string context_parallel_error(std::size_t cp) const override {
    auto const n = [](std::size_t x) { return std::to_string(x); };
    if (cp <= 1) return {};
    if (sizes_.positions) return "cp = " + n(cp) + ": learned positions are read by index, the sequence stays whole";
    if (sizes_.sequence % sequence_pieces(cp, sequence_order::balanced) != 0)
      return "cp = " + n(cp) + " does not cut the sequence of " + n(sizes_.sequence) + " into " +
             n(sequence_pieces(cp, sequence_order::balanced)) + " equal chunks";
    return {};
  }
  [[nodiscard]] std::string expert_parallel_error(std::size_t ep) const override {
    if (ep <= 1 || (sizes_.experts > 0 && sizes_.experts % ep == 0)) return {};
    if (sizes_.experts == 0) return model_description::expert_parallel_error(ep);
    return "ep = " + std::to_string(ep) + " does not divide the " + std::to_string(sizes_.experts) + " experts";
  }

 protected:
  // The parameters stage `stage` declares on `mesh`.
  [[nodiscard]] virtual std::vector<parameter_spec> stage_parameters(mesh_shape const& mesh,
                                                                     std::size_t stage) const = 0;

 private:
  decoder_sizes sizes_;
};

}  // namespace shardmesh::parallel
