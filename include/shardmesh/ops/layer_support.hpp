#pragma once
// What a layer's author needs beside the ops (docs/09-models.md): the
// library's own layers are written with these and the ops alone.
//
//   to_layout(x, l)             x in layout l: x itself when it is already,
//                               else redistributed (collective over x's mesh)
//   make_result<T, R>(mesh, l, extents)
//                               a new, uninitialised tensor of layout l from
//                               the mesh's result pool (counted as
//                               activations); not collective
//   rows_of(view)               a shard as rows of its last dimension
//   planned(mesh, key, make)    layouts planned once per distinct key on a
//                               mesh (op_key names the operands), make()
//                               giving op_layouts; the same error on every
//                               rank when no layouts fit

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <utility>

namespace shardmesh::ops {

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> to_layout(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                              bound_layout const& l,
                                                              execution_space_of<MemorySpace> const& exec = {}) {
  require_held("to_layout", x);
  return detail::to_layout(x, l, exec);
}

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> to_layout(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                              layout const& l,
                                                              execution_space_of<MemorySpace> const& exec = {}) {
  require_held("to_layout", x);
  return detail::to_layout(x, bind(x.mesh().shape(), l), exec);
}

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> make_result(device_mesh const& mesh, bound_layout const& l,
                                                                tensor_index const& global) {
  return detail::make_like<T, Rank, MemorySpace>(mesh, l, global);
}

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] dynamic_dtensor<T, Rank, MemorySpace> make_result(device_mesh const& mesh, layout const& l,
                                                                tensor_index const& global) {
  return detail::make_like<T, Rank, MemorySpace>(mesh, bind(mesh.shape(), l), global);
}

using detail::rows_of;

// The key of an op: its name, then each operand's layout and extents.
class op_key {
 public:
  explicit op_key(std::string name) : text_(std::move(name)) {}
  op_key& operand(mesh_shape const& mesh, bound_layout const& l, std::span<std::size_t const> extents) {
    detail::add_to_key(text_, mesh, l, extents);
    return *this;
  }
  template <class T, std::size_t Rank, class MemorySpace>
  op_key& operand(dynamic_dtensor<T, Rank, MemorySpace> const& x) {
    return operand(x.mesh().shape(), x.bound(), detail::extents_of(x));
  }
  [[nodiscard]] std::string const& text() const { return text_; }

 private:
  std::string text_;
};

// The compute cost model every op on this mesh plans with from now on
// (algebra/propagation.hpp): the latency and compute weights, and the
// workspace a product may hold (which decides between gathering and SUMMA,
// algebra/product_algorithm.hpp). Not collective, but every rank must set
// the same model: ops plan alike on every rank.
inline void set_compute_cost_model(device_mesh const& mesh, compute_cost_model model) {
  mesh.state<detail::op_plans>().set_model(model);
}

[[nodiscard]] inline compute_cost_model compute_cost_model_of(device_mesh const& mesh) {
  return detail::compute_model(mesh);
}

template <class Make>
[[nodiscard]] op_layouts const& planned(device_mesh const& mesh, op_key const& key, Make&& make) {
  return detail::planned(mesh, key.text(), std::forward<Make>(make));
}

}  // namespace shardmesh::ops
