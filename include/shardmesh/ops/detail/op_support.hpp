#pragma once
// What every sharded op shares: its layouts, planned once per distinct op
// on a mesh (the propagation search runs the planner several times), and
// moving an operand to the layout the op runs on.

#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/detail/lru_cache.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/result_pool.hpp"
#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/tensor/dtensor.hpp"
#include "shardmesh/tensor/redistribute.hpp"

#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace shardmesh::ops::detail {

// The op plans of one mesh, keyed by a text that names the op, its
// operands' layouts and extents exactly (no hash collisions), and the cost
// model they are planned with (a new model starts a new cache).
class op_plans {
 public:
  explicit op_plans(shardmesh::detail::mesh_context const&) {}
  template <class Make>
  std::shared_ptr<op_layouts const> get(std::string const& key, Make&& make) {
    return cache_.get(key, std::forward<Make>(make));
  }
  [[nodiscard]] compute_cost_model model() const {
    std::lock_guard lock(mutex_);
    return model_;
  }
  void set_model(compute_cost_model m) {
    std::lock_guard lock(mutex_);
    model_ = m;
    cache_.clear();
  }

 private:
  shardmesh::detail::lru_cache<std::string, op_layouts> cache_{4096};
  mutable std::mutex mutex_;
  compute_cost_model model_;
};

// The key of an op: its name, then each operand's layout and extents.
inline void add_to_key(std::string& key, mesh_shape const& mesh, bound_layout const& l,
                       std::span<std::size_t const> extents) {
  key.append("|").append(to_string(mesh, l).view()).append("[");
  for (std::size_t e : extents) key.append(std::to_string(e)).append(",");
  key.append("]");
}

// The compute cost model the mesh's ops plan with (set_compute_cost_model).
inline compute_cost_model compute_model(device_mesh const& mesh) { return mesh.state<op_plans>().model(); }

// The op's layouts, made by make() on first use; throws `what` and the
// reason when no layouts fit (the same on every rank: the inputs are).
template <class Make>
op_layouts const& planned(device_mesh const& mesh, std::string const& key, Make&& make) {
  auto const plan = mesh.state<op_plans>().get(key, std::forward<Make>(make));
  if (!plan->ok) throw invalid_layout_error(std::string(plan->why.view()));
  return *plan;  // the cache holds it while the mesh lives; callers copy what they keep
}

template <class T, std::size_t Rank, class MemorySpace>
std::span<std::size_t const> extents_of(dynamic_dtensor<T, Rank, MemorySpace> const& x) {
  return std::span<std::size_t const>(x.global_extents().data(), Rank);
}

// A View of these extents for an op's result or saved state, uninitialised,
// from the mesh's pool (result_pool.hpp).
template <class View>
View pooled(device_mesh const& mesh, tensor_index const& extents) {
  return mesh.state<result_pools>().of<View>().get(extents);
}

// A new, uninitialised tensor in layout l (not collective: its layout and
// extents come from an op every rank planned alike).
template <class T, std::size_t Rank, class MemorySpace>
dynamic_dtensor<T, Rank, MemorySpace> make_like(device_mesh const& mesh, bound_layout const& l,
                                                tensor_index const& global) {
  using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
  tensor_index const local = local_extents(mesh.shape(), l, global, mesh.rank());
  return tensor::adopt(mesh, unbind(mesh.shape(), l), global, pooled<typename tensor::view_type>(mesh, local));
}

// x's values converted to U (float to and from bf16, say) in a new tensor of x's layout; x itself when U is its type.
template <class U, class T, std::size_t Rank, class MemorySpace>
dynamic_dtensor<U, Rank, MemorySpace> converted(dynamic_dtensor<T, Rank, MemorySpace> const& x,
                                                execution_space_of<MemorySpace> const& exec) {
  if constexpr (std::is_same_v<U, T>) {
    return x;
  } else {
    auto out = make_like<U, Rank, MemorySpace>(x.mesh(), x.bound(), x.global_extents());
    local::convert(exec, local::flat(x.local()), local::flat(out.local()));
    return out;
  }
}

// x in layout l: x itself when it is already, else redistributed. An op's
// operands were agreed on when they were made and its layouts planned alike
// on every rank, so the redistribution's agreement round is skipped, unless
// the tensor is large enough for a count to overflow MPI's int somewhere
// (the same decision everywhere: it depends on the global extents only).
template <class T, std::size_t Rank, class MemorySpace>
dynamic_dtensor<T, Rank, MemorySpace> to_layout(dynamic_dtensor<T, Rank, MemorySpace> const& x, bound_layout const& l,
                                                execution_space_of<MemorySpace> const& exec) {
  mesh_shape const& shape = x.mesh().shape();
  if (shardmesh::detail::normalized(shape, x.bound()) == shardmesh::detail::normalized(shape, l)) return x;
  std::size_t elements = 1;
  for (std::size_t d = 0; d < Rank; ++d) elements *= x.global_extents()[d];
  bool const small = elements < static_cast<std::size_t>(std::numeric_limits<int>::max());
  using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
  tensor const into = make_like<T, Rank, MemorySpace>(x.mesh(), l, x.global_extents());
  return redistribution<tensor>(x, unbind(shape, l), &into, completion::immediate, exec,
                                small ? shardmesh::detail::agreement::done : shardmesh::detail::agreement::check)
      .get();
}

// A shard as rows of its last dimension: [product of the others, last],
// also when the last extent is 0.
template <class View>
auto rows_of(View const& v) {
  std::size_t rows = 1;
  for (std::size_t d = 0; d + 1 < View::rank(); ++d) rows *= v.extent(d);
  return local::reshaped_view<View, 2>(v.data(), rows, v.extent(View::rank() - 1));
}

// Both operands on one mesh, or the same error on every rank.
template <class A, class B>
void require_same_mesh(std::string_view op, A const& a, B const& b) {
  if (a.mesh() != b.mesh())
    throw mismatched_tensor_error(std::string(op) + ": " + a.notation() + " and " + b.notation() +
                                  " live on different meshes");
}

}  // namespace shardmesh::ops::detail
