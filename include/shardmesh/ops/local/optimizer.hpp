#pragma once
// The optimizers' elementwise work on a rank's block of a parameter, its
// gradient and its state (1-D views of equal extents): one update rule's
// element step applied to every element, and the sum of squares the global
// gradient norm is made of.

#include "shardmesh/ops/local/elementwise.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>

namespace shardmesh::ops::local {

// step(p(i), scale g(i), s) for every i, where s holds the element's N
// state values (state[k](i)), read before and written back after. The
// gradient (of T, or 16 bits of a float parameter) is scaled in T, as the
// step's own arithmetic is.
template <class ExecSpace, class Step, local_view<1, ExecSpace> P, local_view<1, ExecSpace> G, class S, std::size_t N>
void apply_update(ExecSpace const& exec, Step const& step, P const& p, G const& g, Kokkos::Array<S, N> const& state,
                  double scale) {
  detail::require_same_extents("update", "parameter", p, "gradient", g);
  for (std::size_t k = 0; k != N; ++k)
    detail::require_same_extents("update", "parameter", p, ("state tensor " + std::to_string(k)).c_str(), state[k]);
  using T = typename P::non_const_value_type;
  T const s = static_cast<T>(scale);
  Kokkos::parallel_for(
      "shardmesh::update", detail::elements(exec, p.size()), KOKKOS_LAMBDA(std::size_t i) {
        Kokkos::Array<T, N> element;
        for (std::size_t k = 0; k != N; ++k) element[k] = state[k](i);
        T value = p(i);
        step(value, s * static_cast<T>(g(i)), element.data());
        p(i) = value;
        for (std::size_t k = 0; k != N; ++k) state[k](i) = element[k];
      });
}

// The sum of x(i)^2, accumulated in double, into `out` (a 0-d View the
// kernel writes: nothing waits for it). Eight elements at a time, summed as
// a tree: one running sum would make every element wait for the previous
// one's addition (the global norm reads every gradient).
template <class ExecSpace, local_view<1, ExecSpace> X, class Out>
void sum_of_squares(ExecSpace const& exec, X const& x, Out const& out) {
  static_assert(Kokkos::is_view_v<Out> && Out::rank == 0, "sum_of_squares: the result is a 0-d View");
  constexpr std::size_t lanes = 8;
  std::size_t const n = x.size();
  Kokkos::parallel_reduce(
      "shardmesh::sum_of_squares", detail::elements(exec, (n + lanes - 1) / lanes),
      KOKKOS_LAMBDA(std::size_t block, double& acc) {
        double squares[lanes];
        for (std::size_t j = 0; j < lanes; ++j) {
          std::size_t const i = block * lanes + j;
          double const value = i < n ? static_cast<double>(x(i)) : 0.0;
          squares[j] = value * value;
        }
        for (std::size_t width = lanes / 2; width > 0; width /= 2)
          for (std::size_t j = 0; j < width; ++j) squares[j] += squares[j + width];
        acc += squares[0];
      },
      out);
}

}  // namespace shardmesh::ops::local
