#pragma once
// Views of a rank's local shard as the local kernels want them. A shard is a
// contiguous LayoutRight view of any rank; the kernels take it flat (1-D),
// as rows [size / n, n], or as [outer, n, inner] around the dimension an op
// works on. The views returned are unmanaged: they alias the shard's data
// and do not keep it alive, so as_rows(make_a_view(), n) dangles.
//
// Convention of every kernel in shardmesh::ops::local: the first argument
// is the execution-space instance, then inputs, then outputs; each view is
// its own template parameter constrained by local_view, so managed,
// unmanaged and const views mix freely. Kernels run only on that instance
// and never fence it. Extents that do not fit throw local_extents_error
// before anything runs.

#include "shardmesh/errors.hpp"

#include <Kokkos_Core.hpp>

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace shardmesh::ops::local {

// A Kokkos view of rank Rank whose memory ExecSpace can reach.
template <class V, std::size_t Rank, class ExecSpace>
concept local_view = Kokkos::is_view_v<V> && Kokkos::is_execution_space_v<ExecSpace> && V::rank() == Rank &&
                     static_cast<bool>(Kokkos::SpaceAccessibility<ExecSpace, typename V::memory_space>::accessible);

namespace detail {

// T with Rank pointers: Kokkos's data type for Rank dynamic extents.
template <class T, std::size_t Rank>
struct dynamic_data {
  using type = typename dynamic_data<T*, Rank - 1>::type;
};
template <class T>
struct dynamic_data<T, 0> {
  using type = T;
};

}  // namespace detail

// The unmanaged LayoutRight view of V's elements with Rank dimensions.
template <class V, std::size_t Rank>
using reshaped_view = Kokkos::View<typename detail::dynamic_data<typename V::value_type, Rank>::type,
                                   Kokkos::LayoutRight, typename V::memory_space, Kokkos::MemoryUnmanaged>;

namespace detail {

// "[3, 5]"
template <class V>
std::string shape(V const& v) {
  std::string s = "[";
  for (std::size_t d = 0; d < V::rank(); ++d) s += (d == 0 ? "" : ", ") + std::to_string(v.extent(d));
  return s + "]";
}

inline void require(bool ok, char const* kernel, std::string const& what) {
  if (!ok) throw local_extents_error(std::string("shardmesh::ops::local::") + kernel + ": " + what);
}

// Same rank and extents; the names say which views in the message.
template <class A, class B>
void require_same_extents(char const* kernel, char const* a_name, A const& a, char const* b_name, B const& b) {
  bool same = A::rank() == B::rank();
  for (std::size_t d = 0; same && d < A::rank(); ++d) same = a.extent(d) == b.extent(d);
  require(same, kernel, std::string(b_name) + " is " + shape(b) + " but " + a_name + " is " + shape(a));
}

// A team per row: TeamPolicy's league size is an int.
inline int league_size(char const* kernel, std::size_t rows) {
  require(rows <= static_cast<std::size_t>(INT_MAX), kernel, std::to_string(rows) + " rows exceed a league");
  return static_cast<int>(rows);
}

template <class V>
auto data_of(V const& v, char const* what) {
  if (!v.span_is_contiguous())
    throw std::invalid_argument(std::string("shardmesh::ops::local::") + what + ": the view " + shape(v) +
                                " is not contiguous");
  return v.data();
}

}  // namespace detail

// Every element of v, in row-major order. v must be contiguous and, if its
// rank is above 1, LayoutRight (so that flat order is row-major).
template <class V>
  requires Kokkos::is_view_v<V> && (V::rank() <= 1 || std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>)
reshaped_view<V, 1> flat(V const& v) {
  return reshaped_view<V, 1>(detail::data_of(v, "flat"), v.size());
}

// v as rows of n elements: [size / n, n]. n == 0 needs an empty v and gives [0, 0].
template <class V>
  requires Kokkos::is_view_v<V> && (V::rank() <= 1 || std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>)
reshaped_view<V, 2> as_rows(V const& v, std::size_t n) {
  std::size_t const size = v.size();
  detail::require(n == 0 ? size == 0 : size % n == 0, "as_rows",
                  detail::shape(v) + " does not split into rows of " + std::to_string(n));
  return reshaped_view<V, 2>(detail::data_of(v, "as_rows"), n == 0 ? 0 : size / n, n);
}

// v as [outer, n, inner]: a reduction's or a broadcast's view of the
// dimension it works on, with everything before and after it folded.
template <class V>
  requires Kokkos::is_view_v<V> && (V::rank() <= 1 || std::is_same_v<typename V::array_layout, Kokkos::LayoutRight>)
reshaped_view<V, 3> as_3d(V const& v, std::size_t outer, std::size_t n, std::size_t inner) {
  detail::require(outer * n * inner == v.size(), "as_3d",
                  detail::shape(v) + " is not [" + std::to_string(outer) + ", " + std::to_string(n) + ", " +
                      std::to_string(inner) + "]");
  return reshaped_view<V, 3>(detail::data_of(v, "as_3d"), outer, n, inner);
}

}  // namespace shardmesh::ops::local
