#pragma once
// A parameter of any rank as the training step sees it: its state layouts,
// its value and gradient as flat local blocks, and the operations of a
// step (its part of a fused gather, the reduction's fallback, the norm, the
// update of the whole block or of this rank's rows).

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/optimizer.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/strategy/state_sharding.hpp"
#include "shardmesh/train/optimizer.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh::parallel::detail {

template <class T, class MemorySpace>
class trainable {
 public:
  using flat_view = Kokkos::View<T*, MemorySpace>;  // values
  using grad_type = accumulation_t<T>;
  using grad_view = Kokkos::View<grad_type*, MemorySpace>;  // gradients
  using exec_type = execution_space_of<MemorySpace>;
  using sum_slot = Kokkos::View<double, MemorySpace, Kokkos::MemoryUnmanaged>;  // one number a kernel writes

  // A gradient's local block, flat, in the type the parameter keeps it in:
  // grad_type, or T (nn/parameter.hpp: keep_grad_in_value_type).
  struct grad_block {
    grad_view wide;
    flat_view narrow;
    bool in_value_type = false;
    [[nodiscard]] std::size_t size() const { return in_value_type ? narrow.size() : wide.size(); }
  };

  trainable(std::size_t stage, bool decays, state_layouts layouts)
      : stage_(stage), decays_(decays), layouts_(std::move(layouts)) {}
  trainable(trainable const&) = delete;
  trainable& operator=(trainable const&) = delete;
  virtual ~trainable() = default;

  // The model stage (gpt::stage_name) whose forward and backward use it.
  [[nodiscard]] std::size_t stage() const { return stage_; }
  [[nodiscard]] state_layouts const& layouts() const { return layouts_; }
  // Whether the optimizer's weight decay applies to it.
  [[nodiscard]] bool decays() const { return decays_; }

  [[nodiscard]] virtual std::string const& name() const = 0;
  [[nodiscard]] virtual device_mesh const& mesh() const = 0;
  [[nodiscard]] virtual tensor_index const& global_extents() const = 0;
  // ZeRO-3: the stored value's block (this rank's rows), a new
  // compute-layout block for a gather to fill (both flat), the gather done,
  // and the gathered value freed.
  [[nodiscard]] virtual flat_view stored_block() const = 0;
  virtual flat_view gather_into() = 0;
  virtual void gathered_in() = 0;
  virtual void release() = 0;

  [[nodiscard]] virtual bool has_grad() const = 0;
  // The accumulated (unreduced) gradient's local block.
  [[nodiscard]] virtual grad_block accumulated() const = 0;
  // A new gradient in the reduced layout, uninitialised, replacing the
  // accumulated one: its local block, for the reduction to fill.
  virtual grad_block new_reduced() = 0;
  // The reduction by the algebra's plan, one parameter at a time.
  virtual void reduce(exec_type const& exec) = 0;
  virtual void zero_grad() = 0;
  // The sum of squares of the reduced gradient's elements that this rank
  // counts, written into `out` on exec: its block when it is the first of
  // the ranks holding that block (coordinate 0 on every axis the reduced
  // layout does not shard), else 0.
  virtual void counted_sum_of_squares(exec_type const& exec, sum_slot out) const = 0;
  virtual void update(optimizer const& o, std::size_t step, double scale, exec_type const& exec) = 0;
  // ZeRO-1 and 2 (the value stored in the compute layout, the state in the
  // sharded one): the update of this rank's elements [rows.first,
  // rows.second) of the value's block, in place; the whole block, flat,
  // for a gather to complete with the other ranks' rows.
  virtual flat_view update_rows(optimizer const& o, std::size_t step, double scale,
                                std::pair<std::size_t, std::size_t> rows, exec_type const& exec) = 0;

  // Elements of dimension 0 in this rank's block of the compute layout, and
  // elements per index of dimension 0 (a block is rows of this many).
  [[nodiscard]] std::size_t rows() const {
    return local_extents(mesh().shape(), layouts_.compute, global_extents(), mesh().rank())[0];
  }
  [[nodiscard]] std::size_t row_elements() const {
    tensor_index const e = local_extents(mesh().shape(), layouts_.compute, global_extents(), mesh().rank());
    std::size_t n = 1;
    for (std::size_t d = 1; d < layouts_.compute.rank; ++d) n *= e[d];
    return n;
  }

 protected:
  [[nodiscard]] bool counts_its_block() const {
    axis_set const sharding = sharding_axes(layouts_.reduced);
    for (std::size_t a = 0; a < mesh().shape().ndim; ++a)
      if (!sharding.contains(a) && mesh().coordinates()[a] != 0) return false;
    return true;
  }

 private:
  std::size_t stage_;
  bool decays_;
  state_layouts layouts_;
};

template <class T, std::size_t Rank, class MemorySpace>
class trainable_parameter final : public trainable<T, MemorySpace> {
  using base = trainable<T, MemorySpace>;
  using tensor = typename parameter<T, Rank, MemorySpace>::tensor;

 public:
  using typename base::exec_type;
  using typename base::flat_view;
  using typename base::grad_view;
  using G = typename base::grad_type;
  using typename base::grad_block;

  // Sets p's accumulation and storage layouts.
  trainable_parameter(parameter<T, Rank, MemorySpace>& p, std::size_t stage, bool decays, state_layouts const& l,
                      exec_type const& exec)
      : base(stage, decays, l), p_(&p) {
    p.accumulate_in(l.accumulate);
    p.store_in(l.stored, exec);
  }

  [[nodiscard]] std::string const& name() const override { return p_->name(); }
  [[nodiscard]] device_mesh const& mesh() const override { return p_->mesh(); }
  [[nodiscard]] tensor_index const& global_extents() const override { return p_->global_extents(); }
  [[nodiscard]] flat_view stored_block() const override { return ops::local::flat(p_->stored().local()); }
  flat_view gather_into() override { return ops::local::flat(p_->gather_into().local()); }
  void gathered_in() override { p_->gathered_in(); }
  void release() override { p_->release(); }

  [[nodiscard]] bool has_grad() const override { return p_->has_grad(); }
  [[nodiscard]] grad_block accumulated() const override {
    return p_->with_grad([](auto const& g) { return block_of(g.local()); });
  }
  grad_block new_reduced() override {
    bound_layout const& l = this->layouts().reduced;
    return p_->with_grad([&]<class Held>(Held const&) {
      auto v = shardmesh::detail::allocate<typename Held::view_type>(
          name() + " gradient", local_extents(mesh().shape(), l, global_extents(), mesh().rank()));
      p_->replace_grad(Held::adopt(mesh(), unbind(mesh().shape(), l), global_extents(), v));
      return block_of(v);
    });
  }
  void reduce(exec_type const& exec) override {
    p_->with_grad([&](auto const& g) { p_->replace_grad(ops::detail::to_layout(g, this->layouts().reduced, exec)); });
  }
  void zero_grad() override { p_->zero_grad(); }
  void counted_sum_of_squares(exec_type const& exec, typename base::sum_slot out) const override {
    if (!this->counts_its_block()) return Kokkos::deep_copy(exec, out, 0.0);
    p_->with_grad([&](auto const& g) { ops::local::sum_of_squares(exec, ops::local::flat(g.local()), out); });
  }
  void update(optimizer const& o, std::size_t step, double scale, exec_type const& exec) override {
    parallel::update(o, *p_, this->layouts().state, step, scale, exec);
  }
  flat_view update_rows(optimizer const& o, std::size_t step, double scale, std::pair<std::size_t, std::size_t> rows,
                        exec_type const& exec) override {
    flat_view const value = ops::local::flat(p_->stored().local());
    // The reduced gradient holds every row (ZeRO-1) or this rank's (ZeRO-2).
    std::size_t const from = this->layouts().reduced == this->layouts().compute ? rows.first : 0;
    std::size_t const n = rows.second - rows.first;
    std::vector<G*> state;
    for (std::size_t i = 0; i < o.state_tensors(); ++i)
      state.push_back(p_->optimizer_state(i, this->layouts().state).local().data());
    p_->with_grad([&](auto const& g) {
      auto const* grad = g.local().data() + from;
      if constexpr (parameter<T, Rank, MemorySpace>::has_master) {  // the master's block is this rank's rows
        auto const master = ops::local::flat(p_->master(this->layouts().state, exec).local());
        update_block<G, MemorySpace>(o, master.data(), grad, state, n, step, scale, exec);
        ops::local::convert(exec, master, Kokkos::subview(value, rows));
      } else {
        update_block<T, MemorySpace>(o, value.data() + rows.first, grad, state, n, step, scale, exec);
      }
    });
    return value;
  }

 private:
  template <class View>
  static grad_block block_of(View const& v) {
    grad_block b;
    if constexpr (std::is_same_v<typename View::value_type, G>) {
      b.wide = ops::local::flat(v);
    } else {
      b.narrow = ops::local::flat(v);
      b.in_value_type = true;
    }
    return b;
  }

  parameter<T, Rank, MemorySpace>* p_;
};

}  // namespace shardmesh::parallel::detail
