#pragma once
// Elementwise helpers on a rank's local shard, on 1-D views (flat(shard)),
// except add_rows. An output may be one of the inputs.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/local/reshape.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>

namespace shardmesh::ops::local {

namespace detail {
template <class ExecSpace>
auto elements(ExecSpace const& exec, std::size_t n) {
  return Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::size_t>>(exec, 0, n);
}
}  // namespace detail

// y = value.
template <class ExecSpace, local_view<1, ExecSpace> Y>
void fill(ExecSpace const& exec, Y const& y, typename Y::non_const_value_type value) {
  Kokkos::parallel_for(
      "shardmesh::fill", detail::elements(exec, y.size()), KOKKOS_LAMBDA(std::size_t i) { y(i) = value; });
}

// The type y's elements compute in (float for bf16 and fp16).
template <class Y>
using computed_t = accumulation_t<typename Y::non_const_value_type>;

// y = x, converted to y's element type (float to and from bf16, say; one
// 16-bit type to the other through float).
template <class ExecSpace, local_view<1, ExecSpace> X, local_view<1, ExecSpace> Y>
void convert(ExecSpace const& exec, X const& x, Y const& y) {
  detail::require_same_extents("convert", "x", x, "y", y);
  using T = typename Y::non_const_value_type;
  using A = computed_t<X>;
  Kokkos::parallel_for(
      "shardmesh::convert", detail::elements(exec, y.size()),
      KOKKOS_LAMBDA(std::size_t i) { y(i) = static_cast<T>(static_cast<A>(x(i))); });
}

// y *= alpha.
template <class ExecSpace, local_view<1, ExecSpace> Y>
void scale(ExecSpace const& exec, Y const& y, computed_t<Y> alpha) {
  using T = typename Y::non_const_value_type;
  Kokkos::parallel_for(
      "shardmesh::scale", detail::elements(exec, y.size()),
      KOKKOS_LAMBDA(std::size_t i) { y(i) = static_cast<T>(alpha * static_cast<computed_t<Y>>(y(i))); });
}

// y += alpha * x (x may hold bf16 where y holds float: gradients accumulating).
template <class ExecSpace, local_view<1, ExecSpace> X, local_view<1, ExecSpace> Y>
void axpy(ExecSpace const& exec, computed_t<Y> alpha, X const& x, Y const& y) {
  detail::require_same_extents("axpy", "x", x, "y", y);
  using T = typename Y::non_const_value_type;
  using A = computed_t<Y>;
  Kokkos::parallel_for(
      "shardmesh::axpy", detail::elements(exec, y.size()),
      KOKKOS_LAMBDA(std::size_t i) { y(i) = static_cast<T>(static_cast<A>(y(i)) + alpha * static_cast<A>(x(i))); });
}

// y = x + z.
template <class ExecSpace, local_view<1, ExecSpace> X, local_view<1, ExecSpace> Z, local_view<1, ExecSpace> Y>
void add(ExecSpace const& exec, X const& x, Z const& z, Y const& y) {
  detail::require_same_extents("add", "x", x, "z", z);
  detail::require_same_extents("add", "x", x, "y", y);
  using T = typename Y::non_const_value_type;
  using A = computed_t<Y>;
  Kokkos::parallel_for(
      "shardmesh::add", detail::elements(exec, y.size()),
      KOKKOS_LAMBDA(std::size_t i) { y(i) = static_cast<T>(static_cast<A>(x(i)) + static_cast<A>(z(i))); });
}

// y = x * z.
template <class ExecSpace, local_view<1, ExecSpace> X, local_view<1, ExecSpace> Z, local_view<1, ExecSpace> Y>
void multiply(ExecSpace const& exec, X const& x, Z const& z, Y const& y) {
  detail::require_same_extents("multiply", "x", x, "z", z);
  detail::require_same_extents("multiply", "x", x, "y", y);
  using T = typename Y::non_const_value_type;
  using A = computed_t<Y>;
  Kokkos::parallel_for(
      "shardmesh::multiply", detail::elements(exec, y.size()),
      KOKKOS_LAMBDA(std::size_t i) { y(i) = static_cast<T>(static_cast<A>(x(i)) * static_cast<A>(z(i))); });
}

// y[r][j] += v[j] for every row r of y [rows, n]: a bias over rows.
template <class ExecSpace, local_view<2, ExecSpace> Y, local_view<1, ExecSpace> V>
void add_rows(ExecSpace const& exec, Y const& y, V const& v) {
  detail::require(v.extent(0) == y.extent(1), "add_rows",
                  "v is " + detail::shape(v) + " for rows of " + std::to_string(y.extent(1)));
  std::size_t const n = y.extent(1);
  using T = typename Y::non_const_value_type;
  using A = computed_t<Y>;
  Kokkos::parallel_for(
      "shardmesh::add_rows", detail::elements(exec, y.size()), KOKKOS_LAMBDA(std::size_t idx) {
        y(idx / n, idx % n) = static_cast<T>(static_cast<A>(y(idx / n, idx % n)) + static_cast<A>(v(idx % n)));
      });
}

}  // namespace shardmesh::ops::local
