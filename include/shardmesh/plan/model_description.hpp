#pragma once
// A model as the planner, the pipeline partition and the memory and time
// models see it (docs/09-models.md): its stages in forward order, each with
// the parameters it holds (name, global extents, layout on the stage mesh),
// what its forward keeps for its backward per micro-batch, the local work
// one rank does for it (stage_work.hpp) and the redistributions it makes;
// where a pipeline puts it (with the first chunk, in the chunk holding its
// block, or with the last); and the tensor that crosses a chunk boundary.
// A model describes itself once per stage mesh (every mesh axis but "pp")
// and micro-batch, and every stage exactly: blocks that differ are sized
// and priced as they are.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/plan/stage_work.hpp"
#include "shardmesh/strategy/layer_partition.hpp"
#include "shardmesh/strategy/recomputation.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace shardmesh::parallel {

// A parameter: its name (unique over the model), global extents and layout on the stage mesh.
struct parameter_spec {
  std::string name;
  std::vector<std::size_t> extents;
  layout placement;

  [[nodiscard]] std::size_t elements() const {
    std::size_t n = 1;
    for (std::size_t e : extents) n *= e;
    return n;
  }
};

// The declaration named `name` in `declared`, or nullptr.
[[nodiscard]] inline parameter_spec const* find_parameter(std::vector<parameter_spec> const& declared,
                                                          std::string_view name) {
  for (parameter_spec const& p : declared)
    if (p.name == name) return &p;
  return nullptr;
}

// A tensor a stage's forward keeps for its backward, per micro-batch: its
// global extents and layout; per_row: one value per row of that tensor
// (every dimension but the last: a norm's mean or 1/std, a loss's row
// maximum; kept in float whatever the model's precision). A tensor several
// layers keep is declared once; the batch's own ids and targets are not
// declared. core: attention's probabilities, which selective recomputation
// drops (strategy/recomputation.hpp).
struct saved_spec {
  std::string name;
  std::vector<std::size_t> extents;
  layout placement;
  bool per_row = false;
  bool core = false;
};

// A redistribution a stage makes per micro-batch, in its forward or its
// backward: a tensor of global extents `extents` moved from layout `from`
// to layout `to` on the stage mesh. The algebra plans it, so its
// collectives and bytes are the plan's (communication_model.hpp).
struct transition_spec {
  bool in_backward = false;
  std::vector<std::size_t> extents;
  bound_layout from, to;
  std::size_t element_bytes = 0;  // 0: the model's element type
  std::string what;               // the tensor moved, as the plan page names it
};

// Traffic a stage sends that is not a layout transition, per micro-batch:
// context-parallel attention's ring of key/value blocks (point to point),
// and a mixture of experts' token exchange (uneven all-to-alls), on the
// mesh axis `axis`; `calls` collectives that move `elements` elements of
// the model's type and `statistic_elements` in its accumulation type
// (float), received by the stage mesh's rank 0 in all.
struct exchange_spec {
  bool in_backward = false;
  step_kind kind = step_kind::permute;  // point to point, or all_to_all_v
  std::string axis;
  std::size_t calls = 0;
  double elements = 0, statistic_elements = 0;
  std::string what;  // what moves, as the plan page names it
};

// Where a pipeline puts a stage: with the first chunk, in the chunk that
// holds its block, or with the last chunk.
enum class stage_place { first, block, last };

struct stage_description {
  std::string name;  // "embedding", "h0", ...
  stage_place place = stage_place::block;
  stage_kind kind = stage_kind::block;  // whose calibrated overhead it pays (hardware_model.hpp)
  std::vector<parameter_spec> parameters;
  std::vector<saved_spec> saved;
  stage_work work;  // on the stage mesh's rank 0 (the largest shards)
  std::vector<transition_spec> transitions;
  // What selective recomputation runs again in backward: the attention
  // core's products and kernels (a stage without attention has none).
  stage_work core;
  std::vector<exchange_spec> exchanges;
};

// What crosses a chunk boundary per micro-batch: an activation (or its
// gradient) of these global extents in this layout on the stage mesh.
struct boundary_spec {
  std::vector<std::size_t> extents;
  layout placement;
};

class model_description {
 public:
  model_description() = default;
  model_description(model_description const&) = default;
  model_description& operator=(model_description const&) = default;
  virtual ~model_description() = default;

  // The blocks a pipeline's chunks divide (the stages placed `block`, in order).
  [[nodiscard]] virtual std::size_t blocks() const = 0;
  // Every stage, in forward order, on `stage_mesh` for a micro-batch of
  // `samples` samples over every data-parallel replica.
  [[nodiscard]] virtual std::vector<stage_description> stages(mesh_shape const& stage_mesh,
                                                              std::size_t samples) const = 0;
  [[nodiscard]] virtual boundary_spec boundary(mesh_shape const& stage_mesh, std::size_t samples) const = 0;
  // Why the model cannot be split over `tp` tensor-parallel ranks; empty when it can.
  [[nodiscard]] virtual std::string tensor_parallel_error(std::size_t tp) const = 0;
  // Why its sequence cannot be split over `cp` ranks, its experts over `ep`; empty when they can (1 always can).
  [[nodiscard]] virtual std::string context_parallel_error(std::size_t cp) const {
    return cp > 1 ? "the model does not split its sequence (cp = " + std::to_string(cp) + ")" : "";
  }
  [[nodiscard]] virtual std::string expert_parallel_error(std::size_t ep) const {
    return ep > 1 ? "the model has no experts to split (ep = " + std::to_string(ep) + ")" : "";
  }
};

// The stages as a run with recomputation `mode` keeps and computes them
// (strategy/recomputation.hpp): selective drops the core's saved tensors
// and runs the core's work again in backward; full keeps only the input of
// each block (the boundary tensor, `input`) and runs the block's whole
// forward again in backward, its redistributions included.
[[nodiscard]] inline std::vector<stage_description> with_recomputation(std::vector<stage_description> stages,
                                                                       recompute_mode mode,
                                                                       boundary_spec const& input) {
  if (mode == recompute_mode::none) return stages;
  for (stage_description& s : stages) {
    if (s.place != stage_place::block) continue;
    stage_work& w = s.work;
    bool const full = mode == recompute_mode::full;
    stage_work const& again = full ? stage_work{w.products, w.forward, {}, {}, {}} : s.core;
    w.recomputed.insert(w.recomputed.end(), again.products.begin(), again.products.end());
    w.input.insert(w.input.end(), again.forward.begin(), again.forward.end());
    if (full) {
      s.saved = {{s.name + ".input", input.extents, input.placement}};
      std::vector<transition_spec> forward;
      for (transition_spec t : s.transitions)
        if (!t.in_backward) forward.push_back((t.in_backward = true, t));
      s.transitions.insert(s.transitions.end(), forward.begin(), forward.end());
      std::vector<exchange_spec> exchanged;
      for (exchange_spec e : s.exchanges)
        if (!e.in_backward) exchanged.push_back((e.in_backward = true, e));
      s.exchanges.insert(s.exchanges.end(), exchanged.begin(), exchanged.end());
    } else {
      std::erase_if(s.saved, [](saved_spec const& t) { return t.core; });
    }
  }
  return stages;
}

// Forward flops of a stage's work (its backward's are twice as many).
[[nodiscard]] inline double forward_flops(stage_work const& w) {
  double f = 0;
  for (product_spec const& p : w.products) f += p.flops();
  return f;
}

// A model's stages on one rank, for one sample.
[[nodiscard]] inline std::vector<stage_description> stages_on_one_rank(model_description const& model) {
  return model.stages(mesh_shape{{"tp", 1}}, 1);
}

// What a balanced pipeline partition weighs: each block's forward flops on
// one rank, and those of the stages placed first and last.
[[nodiscard]] inline layer_costs partition_costs(std::vector<stage_description> const& stages) {
  layer_costs costs;
  for (stage_description const& s : stages) {
    double const f = forward_flops(s.work);
    if (s.place == stage_place::block)
      costs.blocks.push_back(f);
    else
      (s.place == stage_place::first ? costs.embedding : costs.head) += f;
  }
  return costs;
}
[[nodiscard]] inline layer_costs partition_costs(model_description const& model) {
  return partition_costs(stages_on_one_rank(model));
}

// The elements of a tensor of global `extents` in layout `l` on rank
// `rank` of `mesh` (per_row: without its last dimension).
[[nodiscard]] inline std::size_t local_elements(mesh_shape const& mesh, layout const& l,
                                                std::vector<std::size_t> const& extents, std::size_t rank,
                                                bool per_row = false) {
  tensor_index global{};
  std::copy(extents.begin(), extents.end(), global.begin());
  tensor_index const local = local_extents(mesh, bind(mesh, l), global, rank);
  std::size_t n = 1;
  for (std::size_t d = 0; d + (per_row ? 1 : 0) < extents.size(); ++d) n *= local[d];
  return n;
}

}  // namespace shardmesh::parallel
