#pragma once
// A trainable tensor of a layer: its value and its gradient as dtensors in
// the layout the layer declares, both recorded in the mesh's memory ledger
// (parameters, gradients).

#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"
#include "shardmesh/tensor/distribute.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <utility>

namespace shardmesh::parallel {

template <class T, std::size_t Rank, class MemorySpace>
class parameter {
 public:
  using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
  using extents_type = typename tensor::extents_type;

  parameter() = default;
  // Distributes the global values (row-major, on every rank) in layout l.
  parameter(std::string name, device_mesh const& mesh, layout const& l, extents_type const& extents,
            std::span<double const> values)
      : name_(std::move(name)) {
    using host_view =
        Kokkos::View<typename shardmesh::detail::view_data<T, Rank>::type, Kokkos::LayoutRight, Kokkos::HostSpace>;
    tensor_index e{};
    for (std::size_t d = 0; d < Rank; ++d) e[d] = extents[d];
    auto global = shardmesh::detail::allocate<host_view>(name_, e);
    if (values.size() != global.size())
      throw mismatched_tensor_error("parameter " + name_ + ": " + std::to_string(values.size()) + " values for " +
                                    std::to_string(global.size()) + " elements");
    for (std::size_t i = 0; i < values.size(); ++i) global.data()[i] = static_cast<T>(values[i]);
    value_ = distribute<MemorySpace>(mesh, l, global);
    value_entry_ = mesh.track(memory_category::parameters, value_.local().size() * sizeof(T));
  }

  [[nodiscard]] std::string const& name() const { return name_; }
  [[nodiscard]] tensor const& value() const { return value_; }
  [[nodiscard]] layout const& layout_of() const { return value_.layout(); }
  // The gradient summed over every accumulate() since zero_grad(); empty before.
  [[nodiscard]] bool has_grad() const { return has_grad_; }
  [[nodiscard]] tensor const& grad() const { return grad_; }

  // Adds g (moved to the parameter's layout: the reduction a data-parallel
  // or sequence-parallel gradient needs happens here). The first gradient
  // after zero_grad() is copied when no move was needed, since the caller
  // may still hold g.
  void accumulate(tensor const& g, execution_space_of<MemorySpace> const& exec) {
    tensor moved = ops::detail::to_layout(g, value_.bound(), exec);
    if (!has_grad_ && moved.local().data() == g.local().data()) {
      tensor copy = ops::detail::make_like<T, Rank, MemorySpace>(moved.mesh(), value_.bound(), moved.global_extents());
      Kokkos::deep_copy(exec, copy.local(), moved.local());
      moved = copy;
    }
    add(std::move(moved), exec);
  }
  // Adds g, which the caller gives up: the first gradient after zero_grad()
  // takes g's shard without a copy when no move was needed (so a copy of g
  // kept elsewhere would see later accumulations).
  void accumulate(tensor&& g, execution_space_of<MemorySpace> const& exec) {
    tensor moved = ops::detail::to_layout(g, value_.bound(), exec);
    g = {};
    add(std::move(moved), exec);
  }
  void zero_grad() {
    grad_ = {};
    grad_entry_ = {};
    has_grad_ = false;
  }

 private:
  // Adds g, in the parameter's layout and held by nothing else.
  void add(tensor g, execution_space_of<MemorySpace> const& exec) {
    if (!has_grad_) {
      grad_ = tensor::adopt(g.mesh(), value_.layout(), g.global_extents(), g.local());
      grad_entry_ = value_.mesh().track(memory_category::gradients, grad_.local().size() * sizeof(T));
      has_grad_ = true;
    } else {  // in place: grad_ is this parameter's alone
      ops::local::axpy(exec, T(1), ops::local::flat(g.local()), ops::local::flat(grad_.local()));
    }
  }

  std::string name_;
  tensor value_;
  tensor grad_;
  ledger_entry value_entry_, grad_entry_;
  bool has_grad_ = false;
};

}  // namespace shardmesh::parallel
