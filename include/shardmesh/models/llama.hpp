#pragma once
// A Llama-style decoder: token embeddings, blocks of RMS norm, causal
// self-attention with rotary position embeddings and grouped-query
// key/value heads, residual, RMS norm, SwiGLU MLP, residual, then a final
// RMS norm and an untied head (models/decoder.hpp); with experts, some
// blocks' MLP is a mixture of experts. Its parameters and
// stages are declared in llama_description.hpp, and built from there.
//
//   llama<float> model(mesh, config, [&](std::string const& name) { return values[name]; });

#include "shardmesh/errors.hpp"
#include "shardmesh/models/decoder.hpp"
#include "shardmesh/models/llama_description.hpp"
#include "shardmesh/nn/attention.hpp"
#include "shardmesh/nn/declared_parameters.hpp"
#include "shardmesh/nn/decoder_block.hpp"
#include "shardmesh/nn/dense_or_experts.hpp"
#include "shardmesh/nn/embedding.hpp"
#include "shardmesh/nn/layer_norm.hpp"
#include "shardmesh/nn/swiglu_mlp.hpp"
#include "shardmesh/strategy/transformer_layouts.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

struct llama_architecture {
  using config = llama_config;
  template <class T, class MemorySpace>
  using block = decoder_block<T, MemorySpace, dense_or_experts<swiglu_mlp<T, MemorySpace>, T, MemorySpace>>;

  static std::string config_error(config const& c) { return llama_config_error(c); }
  static std::string stage_name(config const& c, std::size_t stage) { return decoder_stage_name(c.layers, stage); }
  static std::vector<parameter_spec> stage_parameters(config const& c, mesh_shape const& mesh, std::size_t stage) {
    return llama_stage_parameters(c, mesh, stage);
  }

  template <class T, class MemorySpace>
  static embedding<T, MemorySpace> make_embedding(declared_parameters<T, MemorySpace> const& declared,
                                                  transformer_layouts const& layouts) {
    return {declared.template take<2>("wte"), layouts.activation};
  }

  template <class T, class MemorySpace>
  static layer_norm<T, 3, MemorySpace> make_norm(declared_parameters<T, MemorySpace> const& declared, config const& c,
                                                 std::string const& name) {
    return {declared.template take<1>(name + "_g"), static_cast<accumulation_t<T>>(c.eps)};
  }

  // Rotary, grouped-query attention from its declared parameters, named prefix + "wq" etc.
  template <class T, class MemorySpace>
  static attention<T, MemorySpace> make_attention(declared_parameters<T, MemorySpace> const& declared, config const& c,
                                                  transformer_layouts const& layouts, std::string const& prefix) {
    using attn = attention<T, MemorySpace>;
    kv_layouts const kv = kv_projection_layouts(llama_sizes(c), declared.mesh().shape());
    auto const projection = [&](std::string const& name, layout const& out) {
      return typename attn::projection(declared.template take<3>(prefix + name), layouts.whole_rows, out);
    };
    std::optional<ops::context_options> context;  // the sequence split on cp: attention over the ring, or all-to-all
    if (declared.mesh().shape().find("cp") != npos) context = ops::context_options{.form = c.context};
    return {projection("wq", layouts.heads),
            projection("wk", kv.output),
            projection("wv", kv.output),
            typename attn::output(declared.template take<3>(prefix + "wo"), layouts.heads, layouts.activation),
            c.rope_base,
            context};
  }

  // The SwiGLU MLP, or the mixture of experts where the block declares one.
  template <class T, class MemorySpace>
  static dense_or_experts<swiglu_mlp<T, MemorySpace>, T, MemorySpace> make_feed(
      declared_parameters<T, MemorySpace> const& declared, config const& c, transformer_layouts const& layouts,
      std::string const& prefix) {
    if (declared.declares(prefix + "router")) {
      if (declared.mesh().shape().find("ep") == npos)
        throw invalid_mesh_error("model: blocks with experts need an \"ep\" mesh axis (of extent 1 for none)");
      using moe = mixture_of_experts<T, MemorySpace>;
      return moe(declared.template take<2>(prefix + "router"), declared.template take<3>(prefix + "experts_up"),
                 declared.template take<3>(prefix + "experts_down"),
                 {.top_k = c.experts.top_k,
                  .capacity_factor = c.experts.capacity,
                  .balance = c.experts.balance,
                  .z_loss = c.experts.z_loss});
    }
    using dense = swiglu_mlp<T, MemorySpace>;
    auto const up = [&](std::string const& name) {
      return typename dense::up(declared.template take<2>(prefix + name), layouts.whole_rows, layouts.features);
    };
    return dense(up("w1"), up("w3"),
                 typename dense::down(declared.template take<2>(prefix + "w2"), layouts.features, layouts.activation));
  }

  template <class T, class MemorySpace>
  static block<T, MemorySpace> make_block(declared_parameters<T, MemorySpace> const& declared, config const& c,
                                          transformer_layouts const& layouts, std::string const& prefix) {
    return {make_norm(declared, c, prefix + "ln1"),
            make_attention(declared, c, layouts, prefix),
            make_norm(declared, c, prefix + "ln2"),
            make_feed(declared, c, layouts, prefix),
            layouts.activation,
            c.recompute};
  }
};

template <class T, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
using llama = decoder<llama_architecture, T, MemorySpace>;

}  // namespace shardmesh::parallel
