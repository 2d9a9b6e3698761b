#pragma once
// A model that lives only in the tests, written as a user would with the
// library's public API and no edit to it: a token-wise residual MLP whose
// blocks have MLPs of different widths. Token embeddings, then per block
// x + w2 gelu(w1 rms(x)) (w1 column-parallel, w2 row-parallel on tp), a
// final RMS norm and an untied head into the cross-entropy.
//
// The runnable model is models/decoder.hpp with this architecture (its own
// block type from nn/ layers); the planner sees it through its own
// model_description, each stage the sum of the declarations of the layers
// it holds (plan/layer_declarations.hpp), every block with its own width.
// It proves the extension point: the trainer, a pipeline and the planner
// take it as they take the GPT and the Llama.

#include <shardmesh/models/decoder.hpp>
#include <shardmesh/models/decoder_description.hpp>
#include <shardmesh/nn/layer_norm.hpp>
#include <shardmesh/nn/mlp.hpp>
#include <shardmesh/ops/elementwise.hpp>
#include <shardmesh/ops/layer_support.hpp>
#include <shardmesh/plan/layer_declarations.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace shardmesh::test::residual {

struct config {
  std::size_t vocabulary = 0, sequence = 0, hidden = 0, layers = 0;
  std::vector<std::size_t> widths;  // each block's MLP width
  double eps = 1e-5;
  bool sequence_parallel = false;
};

template <class T, class M>
class block {
 public:
  using activation = dynamic_dtensor<T, 3, M>;
  using exec_type = execution_space_of<M>;

  block(parallel::layer_norm<T, 3, M> norm, parallel::mlp<T, M> feed, layout activation_layout)
      : norm_(std::move(norm)), feed_(std::move(feed)), activation_(std::move(activation_layout)) {}

  activation forward(activation const& x, exec_type const& exec = {}) {
    return ops::add(x, feed_.forward(norm_.forward(x, exec), exec), exec);
  }
  // The MLP's input gradient comes back P(sum:tp): reduced once, the residual's added in the norm's backward.
  activation backward(activation const& dy, exec_type const& exec = {}) {
    return norm_.backward(ops::to_layout(feed_.backward(dy, exec), activation_, exec), dy, exec);
  }
  template <class Visit>
  void visit_saved(Visit&& visit) {
    norm_.visit_saved(visit);
    feed_.visit_saved(visit);
  }
  template <class Visit>
  void for_each_parameter(std::string const& prefix, Visit&& visit) {
    norm_.for_each_parameter(prefix + "ln", visit);
    feed_.for_each_parameter(prefix, visit);
  }

 private:
  parallel::layer_norm<T, 3, M> norm_;
  parallel::mlp<T, M> feed_;
  layout activation_;
};

// Stage s's parameters: "wte"; "h<l>.ln_g", "h<l>.w1" [hidden, width l], "h<l>.w2"; "lnf_g", "whead".
inline std::vector<parallel::parameter_spec> stage_parameters(config const& c, mesh_shape const& mesh,
                                                              std::size_t stage) {
  parallel::transformer_layouts const L(mesh, false);
  if (stage == 0) return {{"wte", {c.vocabulary, c.hidden}, L.vocabulary}};
  if (stage <= c.layers) {
    std::string const h = "h" + std::to_string(stage - 1) + ".";
    std::size_t const f = c.widths[stage - 1];
    return {{h + "ln_g", {c.hidden}, L.vector}, {h + "w1", {c.hidden, f}, L.column}, {h + "w2", {f, c.hidden}, L.row}};
  }
  if (stage == c.layers + 1) return {{"lnf_g", {c.hidden}, L.vector}, {"whead", {c.hidden, c.vocabulary}, L.column}};
  return {};
}

struct architecture {
  using config = residual::config;
  template <class T, class M>
  using block = residual::block<T, M>;

  static std::string config_error(config const& c) {
    if (c.widths.size() != c.layers)
      return std::to_string(c.widths.size()) + " widths for " + std::to_string(c.layers) + " layers";
    if (c.sequence_parallel) return "sequence_parallel is not supported";
    return parallel::zero_size_error(
        {{"vocabulary", c.vocabulary}, {"sequence", c.sequence}, {"hidden", c.hidden}, {"layers", c.layers}});
  }
  static std::string stage_name(config const& c, std::size_t s) { return parallel::decoder_stage_name(c.layers, s); }
  static std::vector<parallel::parameter_spec> stage_parameters(config const& c, mesh_shape const& mesh,
                                                                std::size_t s) {
    return residual::stage_parameters(c, mesh, s);
  }
  template <class T, class M>
  static parallel::embedding<T, M> make_embedding(parallel::declared_parameters<T, M> const& declared,
                                                  parallel::transformer_layouts const& layouts) {
    return {declared.template take<2>("wte"), layouts.activation};
  }
  template <class T, class M>
  static parallel::layer_norm<T, 3, M> make_norm(parallel::declared_parameters<T, M> const& declared, config const& c,
                                                 std::string const& name) {
    return {declared.template take<1>(name + "_g"), static_cast<T>(c.eps)};
  }
  template <class T, class M>
  static block<T, M> make_block(parallel::declared_parameters<T, M> const& declared, config const& c,
                                parallel::transformer_layouts const& layouts, std::string const& prefix) {
    using feed = parallel::mlp<T, M>;
    feed f(typename feed::up(declared.template take<2>(prefix + "w1"), layouts.whole_rows, layouts.features),
           typename feed::down(declared.template take<2>(prefix + "w2"), layouts.features, layouts.activation));
    return {make_norm(declared, c, prefix + "ln"), std::move(f), layouts.activation};
  }
};

template <class T, class M = Kokkos::DefaultExecutionSpace::memory_space>
using model = parallel::decoder<architecture, T, M>;

// The model as the planner sees it: each stage the sum of its layers' declarations.
class description final : public parallel::model_description {
 public:
  explicit description(config c) : c_(std::move(c)) {}

  [[nodiscard]] std::size_t blocks() const override { return c_.layers; }
  [[nodiscard]] std::vector<parallel::stage_description> stages(mesh_shape const& mesh,
                                                                std::size_t samples) const override {
    parallel::layer_site const at(mesh, false, samples, c_.sequence, c_.hidden);
    std::vector<parallel::stage_description> out;
    for (std::size_t s = 0; s < c_.layers + 3; ++s)
      out.push_back(parallel::declared_stage(
          at, parallel::decoder_stage_name(c_.layers, s), parallel::decoder_stage_place(c_.layers, s),
          parallel::decoder_stage_kind(c_.layers, s), stage_parameters(c_, mesh, s), layers(at, s)));
    return out;
  }
  [[nodiscard]] parallel::boundary_spec boundary(mesh_shape const& mesh, std::size_t samples) const override {
    return {{samples, c_.sequence, c_.hidden}, parallel::transformer_layouts(mesh, false).activation};
  }
  [[nodiscard]] std::string tensor_parallel_error(std::size_t) const override { return {}; }

 private:
  // Token embeddings; per block an RMS norm, an MLP of its own width and the residual; a final RMS norm, the
  // head and the loss.
  [[nodiscard]] parallel::stage_declaration layers(parallel::layer_site const& at, std::size_t s) const {
    if (s == 0) return parallel::declare_embedding(at, c_.vocabulary, false);
    if (s <= c_.layers) {
      parallel::stage_declaration d = parallel::declare_norm(at, "ln", false);
      d += parallel::declare_mlp(at, c_.widths[s - 1], false);
      d += parallel::declare_residual(at);
      return d;
    }
    if (s == c_.layers + 1) {
      parallel::stage_declaration d = parallel::declare_norm(at, "lnf", false);
      d += parallel::declare_head(at, c_.vocabulary);
      return d;
    }
    return parallel::declare_loss(at, c_.vocabulary);
  }

  config c_;
};

}  // namespace shardmesh::test::residual
