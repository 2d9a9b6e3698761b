#pragma once
// The optimizers' elementwise updates on a rank's block of a parameter, its
// gradient and its state (1-D views of equal extents), and the sum of
// squares the global gradient norm is made of. Arithmetic in T, the
// hyperparameters rounded to T once.

#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>

namespace shardmesh::ops::local {

// SGD with momentum and L2 weight decay (PyTorch's SGD):
//   d = scale g + decay p;  m = momentum m + d;  p -= lr m.
template <class ExecSpace, local_view<1, ExecSpace> P, local_view<1, ExecSpace> G, local_view<1, ExecSpace> M>
void sgd_momentum(ExecSpace const& exec, P const& p, G const& g, M const& m, double lr, double momentum, double decay,
                  double scale) {
  detail::require_same_extents("sgd", "parameter", p, "gradient", g);
  detail::require_same_extents("sgd", "parameter", p, "momentum", m);
  using T = typename P::non_const_value_type;
  T const l = static_cast<T>(lr), mu = static_cast<T>(momentum), wd = static_cast<T>(decay), s = static_cast<T>(scale);
  Kokkos::parallel_for(
      "shardmesh::sgd", detail::elements(exec, p.size()), KOKKOS_LAMBDA(std::size_t i) {
        T const d = s * g(i) + wd * p(i);
        m(i) = mu * m(i) + d;
        p(i) -= l * m(i);
      });
}

// AdamW (decoupled weight decay), step t >= 1:
//   d = scale g;  m = b1 m + (1-b1) d;  v = b2 v + (1-b2) d^2;
//   p -= lr (decay p + (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)).
template <class ExecSpace, local_view<1, ExecSpace> P, local_view<1, ExecSpace> G, local_view<1, ExecSpace> M,
          local_view<1, ExecSpace> V>
void adamw(ExecSpace const& exec, P const& p, G const& g, M const& m, V const& v, double lr, double beta1, double beta2,
           double eps, double decay, double scale, std::size_t t) {
  detail::require_same_extents("adamw", "parameter", p, "gradient", g);
  detail::require_same_extents("adamw", "parameter", p, "first moment", m);
  detail::require_same_extents("adamw", "parameter", p, "second moment", v);
  using T = typename P::non_const_value_type;
  auto const step = static_cast<double>(t);
  T const l = static_cast<T>(lr), b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2), e = static_cast<T>(eps),
          wd = static_cast<T>(decay), s = static_cast<T>(scale);
  T const c1 = static_cast<T>(1 / (1 - std::pow(beta1, step))), c2 = static_cast<T>(1 / (1 - std::pow(beta2, step)));
  Kokkos::parallel_for(
      "shardmesh::adamw", detail::elements(exec, p.size()), KOKKOS_LAMBDA(std::size_t i) {
        T const d = s * g(i);
        m(i) = b1 * m(i) + (T(1) - b1) * d;
        v(i) = b2 * v(i) + (T(1) - b2) * d * d;
        p(i) -= l * (wd * p(i) + m(i) * c1 / (Kokkos::sqrt(v(i) * c2) + e));
      });
}

// The sum of x(i)^2, accumulated in double.
template <class ExecSpace, local_view<1, ExecSpace> X>
[[nodiscard]] double sum_of_squares(ExecSpace const& exec, X const& x) {
  double out = 0;
  Kokkos::parallel_reduce(
      "shardmesh::sum_of_squares", detail::elements(exec, x.size()),
      KOKKOS_LAMBDA(std::size_t i, double& acc) {
        auto const value = static_cast<double>(x(i));
        acc += value * value;
      },
      out);
  return out;
}

}  // namespace shardmesh::ops::local
