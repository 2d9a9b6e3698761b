#pragma once
// Rotary position embedding (RoPE, Su et al. 2021) on a rank's local shard
// of [rows, d] where row r is at sequence position position(r): the two
// halves of each row are rotated pairwise, element i < d/2 with element
// i + d/2 (the "rotate half" arrangement), by the angle p theta_i,
// theta_i = base^(-2i/d):
//   y_i = x_i cos - x_{i+d/2} sin,  y_{i+d/2} = x_{i+d/2} cos + x_i sin.
// The rotation is orthogonal: backward rotates the gradient by the
// opposite angle (inverse = true). Angles are computed in double.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>

namespace shardmesh::ops::local {

// Row r's position, for rows [b, t, h] of a shard of `sequence` tokens per
// sample: first + t (t = (r / heads) % sequence) for the tokens before
// `split`, second + (t - split) after it; a shard holding positions
// [first, first + sequence) leaves split past the end. (Two runs: a
// context-parallel rank's tokens in the balanced order, algebra/sequence_chunks.hpp.)
struct rotary_positions {
  std::size_t heads = 1, sequence = 1, first = 0;
  std::size_t split = static_cast<std::size_t>(-1), second = 0;
  KOKKOS_INLINE_FUNCTION std::size_t operator()(std::size_t r) const {
    std::size_t const t = (r / heads) % sequence;
    return t < split ? first + t : second + (t - split);
  }
};

// y = x rotated (or rotated back, inverse). y may be x.
template <class ExecSpace, local_view<2, ExecSpace> X, local_view<2, ExecSpace> Y>
void rotary(ExecSpace const& exec, X const& x, Y const& y, rotary_positions position, double base, bool inverse) {
  detail::require_same_extents("rotary", "x", x, "y", y);
  detail::require(x.extent(1) % 2 == 0, "rotary", "rows of " + std::to_string(x.extent(1)) + " are not of even size");
  using T = typename Y::non_const_value_type;
  using A = accumulation_t<typename X::non_const_value_type>;
  std::size_t const half = x.extent(1) / 2;
  double const log_base = std::log(base);
  double const sign = inverse ? -1.0 : 1.0;
  Kokkos::parallel_for(
      "shardmesh::rotary",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>, Kokkos::IndexType<std::size_t>>(exec, {0, 0},
                                                                                        {x.extent(0), half}),
      KOKKOS_LAMBDA(std::size_t r, std::size_t i) {
        double const theta = Kokkos::exp(-log_base * static_cast<double>(2 * i) / static_cast<double>(2 * half));
        double const angle = sign * static_cast<double>(position(r)) * theta;
        A const c = static_cast<A>(Kokkos::cos(angle));
        A const s = static_cast<A>(Kokkos::sin(angle));
        A const a = static_cast<A>(x(r, i));
        A const b = static_cast<A>(x(r, i + half));
        y(r, i) = static_cast<T>(a * c - b * s);
        y(r, i + half) = static_cast<T>(b * c + a * s);
      });
}

}  // namespace shardmesh::ops::local
