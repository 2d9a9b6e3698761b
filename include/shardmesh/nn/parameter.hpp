#pragma once
// A trainable tensor of a layer: its value, its gradient and its optimizer
// state as dtensors, each in the layout state sharding gives it
// (state_sharding.hpp), each recorded in the mesh's memory ledger
// (parameters, gradients, optimizer state).
//
// The layers read value() in the compute layout. A parameter stored sharded
// (ZeRO-3) has that value only between gathered_in() and release(): the
// trainer gathers the parameters of a model stage together
// (train/detail/fused_gather.hpp) into the shards gather_into() makes. Gradients accumulate in the
// accumulation layout (the compute layout unless the training step asks
// for it partial on "dp", so that nothing reduces before the last micro-step).
//
// Precision: the value is of T; gradients accumulate, and the optimizer's
// state lives, in accumulation_t<T> (float for bf16 and fp16 parameters,
// whose optimizer keeps a float master copy of the value beside its state:
// master()). A bf16 or fp16 parameter may keep its gradient in T instead
// (keep_grad_in_value_type: half the bytes); every accumulation into it
// still adds in float and rounds once.

#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/nn/initializer.hpp"
#include "shardmesh/ops/detail/result_pool.hpp"
#include "shardmesh/ops/layer_support.hpp"
#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"
#include "shardmesh/tensor/distribute.hpp"
#include "shardmesh/tensor/dtensor.hpp"
#include "shardmesh/tensor/generate.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

template <class T, std::size_t Rank, class MemorySpace>
class parameter {
 public:
  using tensor = dynamic_dtensor<T, Rank, MemorySpace>;
  using grad_type = accumulation_t<T>;
  using grad_tensor = dynamic_dtensor<grad_type, Rank, MemorySpace>;
  static constexpr bool has_master = !std::is_same_v<T, grad_type>;
  using extents_type = typename tensor::extents_type;
  using exec_type = execution_space_of<MemorySpace>;

  parameter() = default;
  // Distributes the global values (row-major, on every rank) in layout l.
  parameter(std::string name, device_mesh const& mesh, layout const& l, extents_type const& extents,
            std::span<double const> values)
      : parameter(name, distributed(name, mesh, l, extents, values)) {}
  // Made shard by shard on the device: each rank computes the elements it
  // holds (nn/initializer.hpp); the same values as from a source of init's.
  parameter(std::string name, device_mesh const& mesh, layout const& l, extents_type const& extents,
            initializer const& init)
      : parameter(std::move(name), generate<T, MemorySpace>(mesh, l, extents, init)) {}

  [[nodiscard]] std::string const& name() const { return name_; }
  [[nodiscard]] device_mesh const& mesh() const { return mesh_; }
  [[nodiscard]] tensor_index const& global_extents() const { return stored().global_extents(); }
  // The layout the layers compute with.
  [[nodiscard]] layout layout_of() const { return unbind(mesh().shape(), compute_); }
  [[nodiscard]] bound_layout const& compute_layout() const { return compute_; }

  // The value in the compute layout. Precondition: gathered() (always true
  // unless the parameter is stored sharded).
  [[nodiscard]] tensor const& value() const {
    if (!gathered())
      throw invalid_layout_error("parameter " + name_ + " is stored sharded and was not gathered before use");
    return value_;
  }
  [[nodiscard]] bool gathered() const { return gathered_; }
  // The value between steps: in the compute layout, or sharded (ZeRO-3).
  [[nodiscard]] tensor const& stored() const { return sharded() ? stored_ : value_; }
  [[nodiscard]] bool sharded() const { return sharded_; }

  // Keeps the value in layout l from now on (ZeRO-3 when l differs from the
  // compute layout); the compute-layout value is dropped until gather().
  void store_in(bound_layout const& l, exec_type const& exec = {}) {
    tensor s = ops::to_layout(stored(), l, exec);
    sharded_ = !(l == compute_);
    if (sharded_) {
      stored_ = copy_of(s, exec);
      value_ = {};
    } else {
      value_ = s;
      stored_ = {};
    }
    gathered_ = !sharded_;
    gathered_entry_ = {};
    stored_entry_ = mesh().track(memory_category::parameters, stored().local().size() * sizeof(T));
  }
  // Replaces the stored value by v (same layout), as the optimizer's update.
  void replace_stored(tensor v) {
    ops::detail::take_result(v);  // the parameter's memory, no longer the result pool's
    (sharded() ? stored_ : value_) = std::move(v);
  }

  // A sharded value's compute-layout shard, uninitialised, for a gather
  // (the trainer's, of several parameters at once) to fill; recorded in the
  // ledger from now on. gathered_in() says it is filled.
  [[nodiscard]] tensor const& gather_into() {
    if (!sharded()) throw invalid_layout_error("parameter " + name_ + " is not stored sharded: nothing to gather");
    value_ = ops::make_result<T, Rank, MemorySpace>(mesh(), compute_, global_extents());
    gathered_entry_ = mesh().track(memory_category::parameters, value_.local().size() * sizeof(T));
    return value_;
  }
  void gathered_in() { gathered_ = true; }
  // Frees the gathered value of a sharded parameter.
  void release() {
    if (!sharded()) return;
    value_ = {};
    gathered_ = false;
    gathered_entry_ = {};
  }

  // Where gradients accumulate: the compute layout, or partial on more axes.
  void accumulate_in(bound_layout const& l) { accumulate_ = l; }
  [[nodiscard]] layout accumulation_layout() const { return unbind(mesh().shape(), accumulate_); }

  // The gradient summed over every accumulate() since zero_grad(); empty before.
  [[nodiscard]] bool has_grad() const { return has_grad_; }
  // The gradient kept in grad_type, or the one kept in T (grad_in_value_type()).
  [[nodiscard]] grad_tensor const& grad() const {
    if (narrow_) throw invalid_option_error("parameter " + name_ + " keeps its gradient in its value type");
    return grad_;
  }
  [[nodiscard]] tensor const& narrow_grad() const
    requires has_master
  {
    if (!narrow_) throw invalid_option_error("parameter " + name_ + " keeps its gradient in float");
    return narrow_grad_;
  }
  // f(the gradient), in whichever type it is kept.
  template <class F>
  decltype(auto) with_grad(F&& f) const {
    if constexpr (has_master)
      if (narrow_) return std::forward<F>(f)(narrow_grad_);
    return std::forward<F>(f)(grad_);
  }

  // Keeps the gradient in T rather than grad_type (a bf16 or fp16
  // parameter; the training options' gradient type). Precondition: no
  // gradient is held.
  void keep_grad_in_value_type(bool narrow)
    requires has_master
  {
    if (has_grad_) throw std::logic_error("parameter " + name_ + ": the gradient's type changed while one is held");
    narrow_ = narrow;
  }
  [[nodiscard]] bool grad_in_value_type() const { return narrow_; }

  // Adds g (moved to the accumulation layout: the reduction a
  // sequence-parallel gradient needs happens here). The first gradient
  // after zero_grad() is copied when no move was needed, since the caller
  // may still hold g.
  void accumulate(tensor const& g, exec_type const& exec) {
    tensor moved = ops::to_layout(g, accumulate_, exec);
    if (!has_master || narrow_) {
      if (!has_grad_ && moved.local().data() == g.local().data()) moved = copy_of(moved, exec);
      add(std::move(moved), exec);
    } else {
      add(moved, exec);
    }
  }
  // Adds g, which the caller gives up: the first gradient after zero_grad()
  // takes g's shard without a copy when no move was needed (so a copy of g
  // kept elsewhere would see later accumulations).
  void accumulate(tensor&& g, exec_type const& exec) {
    tensor moved = ops::to_layout(g, accumulate_, exec);
    g = {};
    add(std::move(moved), exec);
  }
  // Adds g, already in float (a bf16 parameter's gradient summed in float,
  // as an embedding's scattered rows are).
  void accumulate(grad_tensor&& g, exec_type const& exec)
    requires has_master
  {
    grad_tensor moved = ops::to_layout(g, accumulate_, exec);
    g = {};
    add(std::move(moved), exec);
  }
  // Replaces the gradient by g (the same gradient in another layout: the
  // step's reduction), in the type it is kept in.
  void replace_grad(grad_tensor g) { replace(grad_, std::move(g)); }
  void replace_grad(tensor g)
    requires has_master
  {
    replace(narrow_grad_, std::move(g));
  }
  void zero_grad() {
    grad_ = {};
    narrow_grad_ = {};
    grad_entry_ = {};
    has_grad_ = false;
  }

  // The optimizer's state tensor i (Adam's m and v, a momentum), zero on
  // first use, in layout l (the state layout).
  [[nodiscard]] grad_tensor& optimizer_state(std::size_t i, bound_layout const& l) {
    if (state_.size() <= i) state_.resize(i + 1);
    auto& [s, entry, made] = state_[i];
    if (!made) {
      made = true;
      s = new_state(l, " optimizer state");
      Kokkos::deep_copy(s.local(), grad_type(0));
      entry = mesh().track(memory_category::optimizer_state, s.local().size() * sizeof(grad_type));
    }
    return s;
  }

  // A bf16 or fp16 parameter's float master copy of its value, in layout l
  // (the state layout), counted with the optimizer's state; made from the
  // stored value on first use. The optimizer updates it and rounds the
  // value from it.
  [[nodiscard]] grad_tensor& master(bound_layout const& l, exec_type const& exec = {})
    requires has_master
  {
    if (!master_made_) {
      master_made_ = true;
      tensor const value = ops::to_layout(stored(), l, exec);
      master_ = new_state(l, " master");
      ops::local::convert(exec, ops::local::flat(value.local()), ops::local::flat(master_.local()));
      master_entry_ = mesh().track(memory_category::optimizer_state, master_.local().size() * sizeof(grad_type));
    }
    return master_;
  }

 private:
  parameter(std::string name, tensor value) : name_(std::move(name)), mesh_(value.mesh()), value_(std::move(value)) {
    compute_ = value_.bound();
    accumulate_ = compute_;
    stored_entry_ = mesh_.track(memory_category::parameters, value_.local().size() * sizeof(T));
  }

  static tensor distributed(std::string const& name, device_mesh const& mesh, layout const& l,
                            extents_type const& extents, std::span<double const> values) {
    using host_view =
        Kokkos::View<typename shardmesh::detail::view_data<T, Rank>::type, Kokkos::LayoutRight, Kokkos::HostSpace>;
    tensor_index e{};
    for (std::size_t d = 0; d < Rank; ++d) e[d] = extents[d];
    auto global = shardmesh::detail::allocate<host_view>(name, e);
    if (values.size() != global.size())
      throw mismatched_tensor_error("parameter " + name + ": " + std::to_string(values.size()) + " values for " +
                                    std::to_string(global.size()) + " elements");
    for (std::size_t i = 0; i < values.size(); ++i) global.data()[i] = static_cast<T>(values[i]);
    return distribute<MemorySpace>(mesh, l, global);
  }

  // A copy of x's shard in memory of its own (not from the result pool:
  // it outlives the step).
  static tensor copy_of(tensor const& x, exec_type const& exec) {
    tensor_index e{};
    for (std::size_t d = 0; d < Rank; ++d) e[d] = x.local().extent(d);
    auto v = shardmesh::detail::allocate<typename tensor::view_type>("shardmesh::parameter", e);
    Kokkos::deep_copy(exec, v, x.local());
    return tensor::adopt(x.mesh(), x.layout(), x.global_extents(), v);
  }

  // A new state tensor in layout l, uninitialised.
  grad_tensor new_state(bound_layout const& l, char const* what) const {
    return grad_tensor::adopt(mesh(), unbind(mesh().shape(), l), global_extents(),
                              shardmesh::detail::allocate<typename grad_tensor::view_type>(
                                  name_ + what, local_extents(mesh().shape(), l, global_extents(), mesh().rank())));
  }

  template <class Held>
  void replace(Held& held, Held g) {
    ops::detail::take_result(g);  // the parameter's memory, no longer the result pool's
    // The same memory (a reduction that had nothing to move) is recorded once, not twice for a moment.
    bool const same = has_grad_ && g.local().data() == held.local().data();
    held = std::move(g);
    if (!same)
      grad_entry_ = mesh().track(memory_category::gradients, held.local().size() * sizeof(typename Held::value_type));
    has_grad_ = true;
  }

  // Adds g (of T or float), in the accumulation layout, to the gradient in
  // the type it is kept in: in place after the first, which is adopted when
  // g is of that type (held by nothing else) and converted when it is not.
  template <class U>
  void add(dynamic_dtensor<U, Rank, MemorySpace> g, exec_type const& exec) {
    auto const into = [&]<class G>(dynamic_dtensor<G, Rank, MemorySpace>& held) {
      if (has_grad_) {  // in place: the gradient is this parameter's alone
        ops::local::axpy(exec, 1, ops::local::flat(g.local()), ops::local::flat(held.local()));
        return;
      }
      using held_tensor = dynamic_dtensor<G, Rank, MemorySpace>;
      typename held_tensor::view_type v;
      if constexpr (std::is_same_v<U, G>) {
        v = g.local();
      } else {
        tensor_index e{};
        for (std::size_t d = 0; d < Rank; ++d) e[d] = g.local().extent(d);
        v = shardmesh::detail::allocate<typename held_tensor::view_type>("shardmesh::parameter gradient", e);
        ops::local::convert(exec, ops::local::flat(g.local()), ops::local::flat(v));
      }
      replace(held, held_tensor::adopt(g.mesh(), unbind(mesh().shape(), accumulate_), g.global_extents(), v));
    };
    if constexpr (has_master)
      if (narrow_) return into(narrow_grad_);
    into(grad_);
  }

  std::string name_;
  device_mesh mesh_;
  tensor value_;   // the compute-layout value (while gathered, when stored sharded)
  tensor stored_;  // the sharded value (ZeRO-3), else empty
  bound_layout compute_, accumulate_;
  grad_tensor grad_;
  tensor narrow_grad_;  // the gradient kept in T instead (narrow_)
  bool narrow_ = false;
  struct state_slot {
    grad_tensor value;
    ledger_entry entry;
    bool made = false;
  };
  std::vector<state_slot> state_;
  grad_tensor master_;
  bool master_made_ = false;
  ledger_entry stored_entry_, gathered_entry_, grad_entry_, master_entry_;
  bool has_grad_ = false;
  bool sharded_ = false, gathered_ = true;
};

}  // namespace shardmesh::parallel
