#pragma once
// What the trainer and the pipeline executor need from a model, or from the
// chunk of one that a pipeline stage holds (docs/09-models.md):
//
//   types      value_type, memory_space; ids_tensor (token ids or sample
//              indices [samples, ...]) and activation (what crosses a chunk
//              boundary), dtensors on the model's mesh
//   structure  mesh() (the stage mesh the chunk lives on); part() (the
//              model_part it holds: its blocks, and whether it holds the
//              first and last stages); block_count() (the blocks of the
//              whole model, which pipeline chunks divide); stage_count()
//              (the stages of the whole model, numbered in forward order)
//   parameters for_each_parameter_of(stage, visit): visit(name, parameter&)
//              for each parameter of that stage the chunk holds, in the
//              same order on every rank; names unique over the model
//   boundary   boundary_layout() and make_boundary(ids): the layout, and a
//              new tensor, of what crosses a chunk boundary for a micro-batch
//   compute    forward_chunk(ids*, x, targets*, count, exec) -> {loss, y}
//              (loss: a std::optional, set by the chunk holding the last
//              stage, averaged over `count` targets: a number, or a
//              device_scalar, which the trainer adds up without reading
//              it on the host); backward_chunk(dy,
//              exec) -> the input's gradient; parameter gradients accumulate
//   saved      take_saved() and restore_saved(saved_activations)
//   trace      trace(trace_hook): the hook called around every stage
//
// `trainable_model<M>` is the concept; `check_model_contract<M>()` fails to
// compile with a message naming the first member M lacks.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/nn/saved_activations.hpp"
#include "shardmesh/nn/stage_trace.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/strategy/layer_partition.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <concepts>
#include <cstddef>
#include <string>

namespace shardmesh::parallel {

namespace detail {

// A visitor for any parameter type: what for_each_parameter_of must accept.
struct parameter_probe {
  template <class P>
  void operator()(std::string const&, P&) const {}
};

template <class M>
concept model_types = requires {
  typename M::value_type;
  typename M::memory_space;
  typename M::ids_tensor;
  typename M::activation;
};

template <class M>
concept model_structure = requires(M const& m) {
  { m.mesh() } -> std::convertible_to<device_mesh const&>;
  { m.part() } -> std::convertible_to<model_part const&>;
  { m.block_count() } -> std::convertible_to<std::size_t>;
  { m.stage_count() } -> std::convertible_to<std::size_t>;
};

template <class M>
concept model_parameters = requires(M& m) { m.for_each_parameter_of(std::size_t{}, parameter_probe{}); };

template <class M>
concept model_boundary = model_types<M> && requires(M const& m, typename M::ids_tensor const& ids) {
  { m.boundary_layout() } -> std::convertible_to<bound_layout>;
  { m.make_boundary(ids) } -> std::same_as<typename M::activation>;
};

template <class M>
concept model_forward = model_types<M> && requires(M& m, typename M::ids_tensor const* ids, typename M::activation x,
                                                   execution_space_of<typename M::memory_space> const& exec) {
  { *m.forward_chunk(ids, x, ids, double{}, exec).loss } -> std::convertible_to<double>;
  { m.forward_chunk(ids, x, ids, double{}, exec).y } -> std::convertible_to<typename M::activation>;
};

template <class M>
concept model_backward = model_types<M> && requires(M& m, typename M::activation dy,
                                                    execution_space_of<typename M::memory_space> const& exec) {
  { m.backward_chunk(dy, exec) } -> std::same_as<typename M::activation>;
};

template <class M>
concept model_saved = requires(M& m, saved_activations s) {
  { m.take_saved() } -> std::same_as<saved_activations>;
  m.restore_saved(std::move(s));
};

template <class M>
concept model_trace = requires(M& m, trace_hook h) { m.trace(h); };

}  // namespace detail

template <class M>
concept trainable_model =
    detail::model_types<M> && detail::model_structure<M> && detail::model_parameters<M> && detail::model_boundary<M> &&
    detail::model_forward<M> && detail::model_backward<M> && detail::model_saved<M> && detail::model_trace<M>;

// True, or a compile error naming what M lacks (each check assumes the
// ones before it hold, so the first message is the one to read).
template <class M>
consteval bool check_model_contract() {
  using namespace detail;
  static_assert(model_types<M>,
                "model contract: the model needs the member types value_type, memory_space, ids_tensor and activation");
  static_assert(model_structure<M>,
                "model contract: the model needs mesh(), part() (a model_part), block_count() and stage_count()");
  static_assert(model_parameters<M>,
                "model contract: the model needs for_each_parameter_of(stage, visit), calling visit(name, parameter)");
  static_assert(!model_types<M> || model_boundary<M>,
                "model contract: the model needs boundary_layout() and make_boundary(ids) returning an activation");
  static_assert(!model_types<M> || model_forward<M>,
                "model contract: the model needs forward_chunk(ids*, x, targets*, count, exec) returning {loss, y}");
  static_assert(!model_types<M> || model_backward<M>,
                "model contract: the model needs backward_chunk(dy, exec) returning the input's gradient");
  static_assert(model_saved<M>, "model contract: the model needs take_saved() and restore_saved(saved_activations)");
  static_assert(model_trace<M>, "model contract: the model needs trace(trace_hook)");
  return true;
}

}  // namespace shardmesh::parallel
