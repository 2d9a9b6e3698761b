#pragma once
// What the small GPT is made of, declared once: its sizes (gpt_config) and,
// for each of its stages (decoder_stages.hpp: 0 the embedding, 1 to L the
// blocks, L + 1 the final norm and head, L + 2 the loss), the parameters it
// holds (name, global extents, and the transformer layout that places
// them). gpt.hpp builds its parameters from these declarations;
// gpt_description hands them, with what decoder_description.hpp reads off
// the same layouts (saved tensors, work, redistributions), to the planner.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/models/decoder_description.hpp"
#include "shardmesh/plan/model_description.hpp"
#include "shardmesh/strategy/recomputation.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

struct gpt_config {
  std::size_t vocabulary = 0, sequence = 0, hidden = 0, heads = 0, head_size = 0, ffn = 0, layers = 0;
  double eps = 1e-5;
  bool sequence_parallel = false;
  recompute_mode recompute = recompute_mode::none;  // activation recomputation per block
};

// What is wrong with c, naming the field; empty if nothing.
[[nodiscard]] inline std::string gpt_config_error(gpt_config const& c) {
  if (std::string why = zero_size_error({{"vocabulary", c.vocabulary},
                                         {"sequence", c.sequence},
                                         {"hidden", c.hidden},
                                         {"heads", c.heads},
                                         {"head_size", c.head_size},
                                         {"ffn", c.ffn},
                                         {"layers", c.layers}});
      !why.empty())
    return why;
  if (!(c.eps > 0)) return "eps = " + std::to_string(c.eps) + " is not above 0";
  return {};
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

// The facts of the GPT the planner reads (decoder_description.hpp).
[[nodiscard]] inline decoder_sizes gpt_sizes(gpt_config const& c) {
  return {c.vocabulary, c.sequence,          c.hidden, c.heads, c.heads, c.head_size, c.ffn,
          c.layers,     c.sequence_parallel, true,     true,    false};
}

// The GPT as the planner sees it (model_description.hpp).
class gpt_description final : public decoder_description {
 public:
  explicit gpt_description(gpt_config const& c) : decoder_description(gpt_sizes(c)), config_(c) {}

  [[nodiscard]] gpt_config const& config() const { return config_; }

 protected:
  [[nodiscard]] std::vector<parameter_spec> stage_parameters(mesh_shape const& mesh, std::size_t stage) const override {
    return gpt_stage_parameters(config_, mesh, stage);
  }

 private:
  gpt_config config_;
};

}  // namespace shardmesh::parallel
