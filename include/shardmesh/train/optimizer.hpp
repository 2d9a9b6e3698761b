#pragma once
// Optimizers on sharded state: SGD with momentum and AdamW. A parameter's
// state (momentum; Adam's m and v) lives in the state layout its ZeRO stage
// gives (state_sharding.hpp); an update moves the stored value and the
// reduced gradient there (a local slice when they are whole on "dp"),
// updates this rank's block, and moves the value back to where it is stored
// (an all-gather in stages 1 and 2). The gradient is scaled by the clipping
// factor inside the update's kernel.
//
//   optimizer o = adamw{.lr = 3e-4, .weight_decay = 0.1};

#include "shardmesh/errors.hpp"
#include "shardmesh/nn/parameter.hpp"
#include "shardmesh/ops/detail/op_support.hpp"
#include "shardmesh/ops/local/optimizer.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <variant>

namespace shardmesh::parallel {

// PyTorch's SGD: L2 weight decay added to the gradient, then momentum.
struct sgd {
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0;
};

// Adam with decoupled weight decay (Loshchilov and Hutter).
struct adamw {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

using optimizer = std::variant<sgd, adamw>;

// Why o's hyperparameters are out of range; empty when they are not.
[[nodiscard]] inline std::string optimizer_error(optimizer const& o) {
  auto const bad = [](char const* what, double value, char const* range) {
    return std::string("optimizer: ") + what + " is " + std::to_string(value) + ", which is not " + range;
  };
  double const inf = std::numeric_limits<double>::infinity();
  auto const in = [](double x, double lo, double hi) { return std::isfinite(x) && x >= lo && x < hi; };
  auto const positive = [&](double x) { return in(x, 0, inf) && x > 0; };
  if (auto const* s = std::get_if<sgd>(&o)) {
    if (!positive(s->lr)) return bad("the learning rate", s->lr, "positive and finite");
    if (!in(s->momentum, 0, 1)) return bad("the momentum", s->momentum, "in [0, 1)");
    if (!in(s->weight_decay, 0, inf)) return bad("the weight decay", s->weight_decay, "non-negative");
    return {};
  }
  auto const& a = std::get<adamw>(o);
  if (!positive(a.lr)) return bad("the learning rate", a.lr, "positive and finite");
  if (!in(a.beta1, 0, 1)) return bad("beta1", a.beta1, "in [0, 1)");
  if (!in(a.beta2, 0, 1)) return bad("beta2", a.beta2, "in [0, 1)");
  if (!positive(a.eps)) return bad("eps", a.eps, "positive and finite");
  if (!in(a.weight_decay, 0, inf)) return bad("the weight decay", a.weight_decay, "non-negative");
  return {};
}

// o for one parameter at one update: its learning rate times `lr_factor`
// (learning_rate.hpp), and its weight decay only where `decays`.
[[nodiscard]] inline optimizer adjusted(optimizer o, double lr_factor, bool decays) {
  std::visit(
      [&](auto& h) {
        h.lr *= lr_factor;
        if (!decays) h.weight_decay = 0;
      },
      o);
  return o;
}

// The number of state tensors o keeps per parameter.
[[nodiscard]] inline std::size_t state_tensors(optimizer const& o) { return std::holds_alternative<sgd>(o) ? 1 : 2; }

// Step t (from 1) of o on p, its gradient times `scale`, in state layout
// `state`. Precondition: p has a gradient in its reduced layout.
template <class T, std::size_t Rank, class MemorySpace>
void update(optimizer const& o, parameter<T, Rank, MemorySpace>& p, bound_layout const& state, std::size_t t,
            double scale, execution_space_of<MemorySpace> const& exec = {}) {
  using ops::local::flat;
  mesh_shape const& shape = p.mesh().shape();
  bool const in_place =
      shardmesh::detail::normalized(shape, p.stored().bound()) == shardmesh::detail::normalized(shape, state);
  auto const value = ops::detail::to_layout(p.stored(), state, exec);  // p.stored() itself when in place
  auto const grad = ops::detail::to_layout(p.grad(), state, exec);
  auto const v = flat(value.local());
  auto const g = flat(grad.local());
  std::visit(
      [&](auto const& h) {
        if constexpr (std::is_same_v<std::decay_t<decltype(h)>, sgd>) {
          ops::local::sgd_momentum(exec, v, g, flat(p.optimizer_state(0, state).local()), h.lr, h.momentum,
                                   h.weight_decay, scale);
        } else {
          ops::local::adamw(exec, v, g, flat(p.optimizer_state(0, state).local()),
                            flat(p.optimizer_state(1, state).local()), h.lr, h.beta1, h.beta2, h.eps, h.weight_decay,
                            scale, t);
        }
      },
      o);
  if (!in_place) p.replace_stored(ops::detail::to_layout(value, p.stored().bound(), exec));
}

}  // namespace shardmesh::parallel
