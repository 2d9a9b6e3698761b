#pragma once
// An optimizer on sharded state: any update rule (update_rule.hpp; sgd and
// adamw in update_rules.hpp, or a user's own) held by value. A parameter's
// state tensors live in the state layout its ZeRO stage gives
// (state_sharding.hpp); an update moves the stored value and the reduced
// gradient there (a local slice when they are whole on "dp"), applies the
// rule's element step to this rank's block, and moves the value back to
// where it is stored (an all-gather in stages 1 and 2).
//
//   optimizer o = adamw{.lr = 3e-4, .weight_decay = 0.1};
//
// The rule's kernel is instantiated when the optimizer is made, for float
// and double parameters in host memory and in the default execution
// space's memory: the trainer, not the user, knows the parameters' types.

#include "shardmesh/errors.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/optimizer.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/train/update_rule.hpp"
#include "shardmesh/train/update_rules.hpp"

#include <Kokkos_Core.hpp>

#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace shardmesh::parallel {

namespace detail {

template <class T, class Space>
using flat_block = Kokkos::View<T*, Kokkos::LayoutRight, Space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// One update of one rank's block: what a rule's kernel reads and writes.
// The gradient is of T, or of a 16-bit type read as T.
template <class T, class Space, class Grad = T>
struct update_views {
  execution_space_of<Space> exec;
  flat_block<T, Space> value;
  flat_block<Grad const, Space> grad;
  std::vector<flat_block<T, Space>> state;
  std::size_t step;
  double scale;
};

template <class... Spaces>
using update_views_in = std::variant<update_views<float, Spaces>..., update_views<double, Spaces>...,
                                     update_views<float, Spaces, bf16>..., update_views<float, Spaces, fp16>...>;

using device_memory = Kokkos::DefaultExecutionSpace::memory_space;

// Every kind of block an update rule's kernel is instantiated for.
using any_update_views =
    std::conditional_t<std::is_same_v<device_memory, Kokkos::HostSpace>, update_views_in<Kokkos::HostSpace>,
                       update_views_in<Kokkos::HostSpace, device_memory>>;

struct rule_interface {
  virtual ~rule_interface() = default;
  [[nodiscard]] virtual std::string error() const = 0;
  [[nodiscard]] virtual std::size_t state_tensors() const = 0;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual std::string state_name(std::size_t i) const = 0;
  [[nodiscard]] virtual std::vector<std::pair<std::string, double>> hyperparameters() const = 0;
  [[nodiscard]] virtual std::shared_ptr<rule_interface const> adjusted(double lr_factor, bool decays) const = 0;
  virtual void apply(any_update_views const& views) const = 0;
};

template <class R>
class rule_holder final : public rule_interface {
 public:
  explicit rule_holder(R rule) : rule_(std::move(rule)) {}
  [[nodiscard]] std::string error() const override { return rule_.error(); }
  [[nodiscard]] std::size_t state_tensors() const override { return R::state_tensors; }
  [[nodiscard]] std::string name() const override { return std::string(R::name); }
  [[nodiscard]] std::string state_name(std::size_t i) const override { return std::string(R::state_names.at(i)); }
  [[nodiscard]] std::vector<std::pair<std::string, double>> hyperparameters() const override {
    return rule_.hyperparameters();
  }
  [[nodiscard]] std::shared_ptr<rule_interface const> adjusted(double lr_factor, bool decays) const override {
    R r = rule_;
    r.lr *= lr_factor;
    if (!decays) r.weight_decay = 0;
    return std::make_shared<rule_holder const>(std::move(r));
  }
  [[nodiscard]] R const& rule() const { return rule_; }
  void apply(any_update_views const& views) const override {
    std::visit(
        [&]<class T, class Space, class Grad>(update_views<T, Space, Grad> const& u) {
          Kokkos::Array<flat_block<T, Space>, R::state_tensors> state;
          for (std::size_t k = 0; k != R::state_tensors; ++k) state[k] = u.state.at(k);
          ops::local::apply_update(u.exec, rule_.template at<T>(u.step), u.value, u.grad, state, u.scale);
        },
        views);
  }

 private:
  R rule_;
};

}  // namespace detail

class optimizer {
 public:
  template <class R>
    requires(!std::same_as<std::remove_cvref_t<R>, optimizer>)
  optimizer(R rule) {  // NOLINT(google-explicit-constructor): `.method = adamw{...}` reads as intended
    check_update_rule<R>();
    rule_ = std::make_shared<detail::rule_holder<R> const>(std::move(rule));
  }

  // Why the rule's hyperparameters are out of range; empty when they are not.
  [[nodiscard]] std::string error() const { return rule_->error(); }

  // The state tensors the rule keeps per parameter, and their names.
  [[nodiscard]] std::size_t state_tensors() const { return rule_->state_tensors(); }
  [[nodiscard]] std::string state_name(std::size_t i) const { return rule_->state_name(i); }

  // The rule's name and its hyperparameters, {name, value}.
  [[nodiscard]] std::string name() const { return rule_->name(); }
  [[nodiscard]] std::vector<std::pair<std::string, double>> hyperparameters() const { return rule_->hyperparameters(); }

  // This optimizer for one parameter at one update: its learning rate
  // times `lr_factor` (learning_rate.hpp), its weight decay only where `decays`.
  [[nodiscard]] optimizer adjusted(double lr_factor, bool decays) const {
    return optimizer(rule_->adjusted(lr_factor, decays));
  }

  // The rule, if it is an R (as std::function::target).
  template <class R>
  [[nodiscard]] R const* target() const {
    auto const* held = dynamic_cast<detail::rule_holder<R> const*>(rule_.get());
    return held ? &held->rule() : nullptr;
  }

  void apply(detail::any_update_views const& views) const { rule_->apply(views); }

 private:
  explicit optimizer(std::shared_ptr<detail::rule_interface const> rule) : rule_(std::move(rule)) {}
  std::shared_ptr<detail::rule_interface const> rule_;
};

// Step t (from 1) of o on n elements of a parameter's value at `value`, its
// gradient at `grad` (of T, or a 16-bit gradient of a float value) times
// `scale`, and its state tensors' elements at `state` (the same n each, all
// in memory_space).
template <class T, class MemorySpace, class Grad>
void update_block(optimizer const& o, T* value, Grad const* grad, std::vector<T*> const& state, std::size_t n,
                  std::size_t t, double scale, execution_space_of<MemorySpace> const& exec = {}) {
  using views = detail::update_views<T, MemorySpace, Grad>;
  static_assert(std::is_constructible_v<detail::any_update_views, views>,
                "optimizers update float and double parameters in host memory or the default execution space's");
  using block = detail::flat_block<T, MemorySpace>;
  views u{exec, block(value, n), detail::flat_block<Grad const, MemorySpace>(grad, n), {}, t, scale};
  for (T* s : state) u.state.push_back(block(s, n));
  o.apply(u);
}

// A bf16 or fp16 parameter's value rounded from its float master copy (in
// the state layout `state`), into the layout it is stored in.
template <class T, std::size_t Rank, class MemorySpace>
  requires parameter<T, Rank, MemorySpace>::has_master
void round_from_master(parameter<T, Rank, MemorySpace>& p, bound_layout const& state,
                       execution_space_of<MemorySpace> const& exec = {}) {
  auto const value = ops::detail::converted<T>(p.master(state, exec), exec);
  mesh_shape const& shape = p.mesh().shape();
  bool const in_place =
      shardmesh::detail::normalized(shape, p.stored().bound()) == shardmesh::detail::normalized(shape, state);
  p.replace_stored(in_place ? value : ops::detail::to_layout(value, p.stored().bound(), exec));
}

// Step t (from 1) of o on p, its gradient times `scale`, in state layout
// `state`. A bf16 or fp16 parameter steps its float master copy (in the
// state layout) and takes its value rounded from it. Precondition: p has a
// gradient in its reduced layout.
template <class T, std::size_t Rank, class MemorySpace>
void update(optimizer const& o, parameter<T, Rank, MemorySpace>& p, bound_layout const& state, std::size_t t,
            double scale, execution_space_of<MemorySpace> const& exec = {}) {
  using param = parameter<T, Rank, MemorySpace>;
  using G = typename param::grad_type;
  std::vector<G*> states;
  for (std::size_t i = 0; i < o.state_tensors(); ++i) states.push_back(p.optimizer_state(i, state).local().data());
  p.with_grad([&](auto const& reduced) {
    auto const grad = ops::detail::to_layout(reduced, state, exec);
    if constexpr (param::has_master) {
      auto& master = p.master(state, exec);
      update_block<G, MemorySpace>(o, master.local().data(), grad.local().data(), states, master.local().size(), t,
                                   scale, exec);
      round_from_master(p, state, exec);
    } else {
      mesh_shape const& shape = p.mesh().shape();
      bool const in_place =
          shardmesh::detail::normalized(shape, p.stored().bound()) == shardmesh::detail::normalized(shape, state);
      auto const value = ops::detail::to_layout(p.stored(), state, exec);  // p.stored() itself when in place
      update_block<T, MemorySpace>(o, value.local().data(), grad.local().data(), states, value.local().size(), t, scale,
                                   exec);
      if (!in_place) p.replace_stored(ops::detail::to_layout(value, p.stored().bound(), exec));
    }
  });
}

}  // namespace shardmesh::parallel
