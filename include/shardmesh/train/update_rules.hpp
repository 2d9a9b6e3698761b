#pragma once
// The update rules shardmesh ships, written against update_rule.hpp as a
// user's own rule is. Arithmetic in the parameter's type T; every constant
// (the hyperparameters and whatever is derived from them, such as 1 - beta
// and the bias corrections) computed in double and rounded to T once per
// update, so that the constants agree with each other.

#include "shardmesh/train/update_rule.hpp"

#include <Kokkos_Core.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

// PyTorch's SGD: L2 weight decay added to the gradient, then momentum:
//   d = g + decay p;  m = momentum m + d;  p -= lr m.
struct sgd {
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0;

  static constexpr char const* name = "sgd";
  static constexpr std::size_t state_tensors = 1;
  static constexpr std::array<char const*, 1> state_names = {"momentum"};

  [[nodiscard]] std::vector<std::pair<std::string, double>> hyperparameters() const {
    return {{"lr", lr}, {"momentum", momentum}, {"weight_decay", weight_decay}};
  }

  [[nodiscard]] std::string error() const {
    using namespace hyperparameter;
    if (!positive(lr)) return hyperparameter::error("the learning rate", lr, "positive and finite");
    if (!in_unit_interval(momentum)) return hyperparameter::error("the momentum", momentum, "in [0, 1)");
    if (!non_negative(weight_decay)) return hyperparameter::error("the weight decay", weight_decay, "non-negative");
    return {};
  }

  template <class T>
  struct step {
    T lr, momentum, decay;
    KOKKOS_FUNCTION void operator()(T& p, T g, T* m) const {
      T const d = g + decay * p;
      m[0] = momentum * m[0] + d;
      p -= lr * m[0];
    }
  };

  template <class T>
  [[nodiscard]] step<T> at(std::size_t) const {
    return {static_cast<T>(lr), static_cast<T>(momentum), static_cast<T>(weight_decay)};
  }
};

// Adam with decoupled weight decay (Loshchilov and Hutter), update t >= 1:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   p -= lr (decay p + (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)).
struct adamw {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;

  static constexpr char const* name = "adamw";
  static constexpr std::size_t state_tensors = 2;
  static constexpr std::array<char const*, 2> state_names = {"first_moment", "second_moment"};

  [[nodiscard]] std::vector<std::pair<std::string, double>> hyperparameters() const {
    return {{"lr", lr}, {"beta1", beta1}, {"beta2", beta2}, {"eps", eps}, {"weight_decay", weight_decay}};
  }

  [[nodiscard]] std::string error() const {
    using namespace hyperparameter;
    if (!positive(lr)) return hyperparameter::error("the learning rate", lr, "positive and finite");
    if (!in_unit_interval(beta1)) return hyperparameter::error("beta1", beta1, "in [0, 1)");
    if (!in_unit_interval(beta2)) return hyperparameter::error("beta2", beta2, "in [0, 1)");
    if (!positive(eps)) return hyperparameter::error("eps", eps, "positive and finite");
    if (!non_negative(weight_decay)) return hyperparameter::error("the weight decay", weight_decay, "non-negative");
    return {};
  }

  template <class T>
  struct step {
    T lr, beta1, beta2, eps, decay;
    T weight1, weight2;          // 1 - beta, in double first: T(1) - T(beta) is off by beta's rounding
    T correction1, correction2;  // 1 / (1 - beta^t)
    KOKKOS_FUNCTION void operator()(T& p, T g, T* s) const {
      s[0] = beta1 * s[0] + weight1 * g;
      s[1] = beta2 * s[1] + weight2 * g * g;
      p -= lr * (decay * p + s[0] * correction1 / (Kokkos::sqrt(s[1] * correction2) + eps));
    }
  };

  template <class T>
  [[nodiscard]] step<T> at(std::size_t t) const {
    auto const n = static_cast<double>(t);
    return {static_cast<T>(lr),
            static_cast<T>(beta1),
            static_cast<T>(beta2),
            static_cast<T>(eps),
            static_cast<T>(weight_decay),
            static_cast<T>(1 - beta1),
            static_cast<T>(1 - beta2),
            static_cast<T>(1 / (1 - std::pow(beta1, n))),
            static_cast<T>(1 / (1 - std::pow(beta2, n)))};
  }
};

}  // namespace shardmesh::parallel
