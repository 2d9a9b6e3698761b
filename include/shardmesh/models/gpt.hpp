#pragma once
// A small GPT: token and learned position embeddings, blocks of layer norm,
// causal self-attention, residual, layer norm, GELU MLP, residual, then a
// final layer norm and the head (models/decoder.hpp). Its parameters and
// stages are declared in gpt_description.hpp, and built from there.
//
//   gpt<float> model(mesh, config, [&](std::string const& name) { return values[name]; });
//   auto f = model.forward(ids, targets);   // loss, logits
//   model.backward();                        // gradients in each parameter

#include "shardmesh/errors.hpp"
#include "shardmesh/models/decoder.hpp"
#include "shardmesh/models/gpt_description.hpp"
#include "shardmesh/nn/attention.hpp"
#include "shardmesh/nn/declared_parameters.hpp"
#include "shardmesh/nn/decoder_block.hpp"
#include "shardmesh/nn/embedding.hpp"
#include "shardmesh/nn/layer_norm.hpp"
#include "shardmesh/nn/mlp.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

struct gpt_architecture {
  using config = gpt_config;
  template <class T, class MemorySpace>
  using block = decoder_block<T, MemorySpace, mlp<T, MemorySpace>>;

  static std::string config_error(config const& c) { return gpt_config_error(c); }
  static std::string stage_name(config const& c, std::size_t stage) { return decoder_stage_name(c.layers, stage); }
  static std::vector<parameter_spec> stage_parameters(config const& c, mesh_shape const& mesh, std::size_t stage) {
    return gpt_stage_parameters(c, mesh, stage);
  }

  template <class T, class MemorySpace>
  static embedding<T, MemorySpace> make_embedding(declared_parameters<T, MemorySpace> const& declared,
                                                  transformer_layouts const& layouts) {
    // Its learned positions are looked up by index: a sequence stored in the balanced order is not in position order.
    if (declared.mesh().shape().find("cp") != npos)
      throw invalid_option_error(
          "gpt: context parallelism (a \"cp\" axis) needs positions placed by attention: use the Llama-style model, "
          "whose rotary embeddings read each token's position from the sequence order");
    return {declared.template take<2>("wte"), declared.template take<2>("wpe"), layouts.activation};
  }

  template <class T, class MemorySpace>
  static layer_norm<T, 3, MemorySpace> make_norm(declared_parameters<T, MemorySpace> const& declared, config const& c,
                                                 std::string const& name) {
    return {declared.template take<1>(name + "_g"), declared.template take<1>(name + "_b"),
            static_cast<accumulation_t<T>>(c.eps)};
  }

  // A block from its declared parameters, named prefix + "wq" etc.
  template <class T, class MemorySpace>
  static block<T, MemorySpace> make_block(declared_parameters<T, MemorySpace> const& declared, config const& c,
                                          transformer_layouts const& layouts, std::string const& prefix) {
    using attn = attention<T, MemorySpace>;
    using feed = mlp<T, MemorySpace>;
    auto const projection = [&](std::string const& name) {
      return typename attn::projection(declared.template take<3>(prefix + name), layouts.whole_rows, layouts.heads);
    };
    attn a(projection("wq"), projection("wk"), projection("wv"),
           typename attn::output(declared.template take<3>(prefix + "wo"), layouts.heads, layouts.activation));
    feed f(typename feed::up(declared.template take<2>(prefix + "w1"), layouts.whole_rows, layouts.features),
           typename feed::down(declared.template take<2>(prefix + "w2"), layouts.features, layouts.activation));
    return {make_norm(declared, c, prefix + "ln1"),
            std::move(a),
            make_norm(declared, c, prefix + "ln2"),
            std::move(f),
            layouts.activation,
            c.recompute};
  }
};

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
using gpt = decoder<gpt_architecture, T, MemorySpace>;

// The GPT's block (benchmarks make one alone).
template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
using transformer_block = gpt_architecture::block<T, MemorySpace>;

}  // namespace shardmesh::parallel
