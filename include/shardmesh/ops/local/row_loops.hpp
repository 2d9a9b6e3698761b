#pragma once
// Loops along one row inside a team-per-row kernel (softmax, layer norm).
// A team of one thread, what Kokkos' host backends give, walks the row in a
// plain loop marked for SIMD: the compiler may then put a float sum into
// vector lanes, which it never does on its own (a float sum's order is part
// of its value). A larger team, a GPU's, splits the row over its threads.
// Sums come out in some order of the same terms: callers must not depend on
// the order.
//
// The loop bodies read rows through row(v, r) and elements(v): a plain
// pointer where the view is contiguous along the row, since GCC vectorises
// no loop that indexes a Kokkos View through its operator().

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <type_traits>

// A pragma for the host compiler's OpenMP SIMD; nothing elsewhere (GPU
// builds, compilers without OpenMP).
#if defined(_OPENMP) && !defined(KOKKOS_ENABLE_CUDA) && !defined(KOKKOS_ENABLE_HIP) && !defined(KOKKOS_ENABLE_SYCL)
#define SHARDMESH_HOST_SIMD(clause) _Pragma(clause)
#else
#define SHARDMESH_HOST_SIMD(clause)
#endif

namespace shardmesh::ops::local::detail {

// Row r of a 2-D view, or a 1-D view, that is not contiguous: [j] calls the view.
template <class V>
struct view_row {
  V view;
  std::size_t r;
  KOKKOS_INLINE_FUNCTION decltype(auto) operator[](std::size_t j) const {
    if constexpr (V::rank() == 1)
      return view(j);
    else
      return view(r, j);
  }
};

template <class V>
inline constexpr bool contiguous_rows =
    std::is_same_v<typename V::array_layout, Kokkos::LayoutRight> ||
    (V::rank() == 1 && std::is_same_v<typename V::array_layout, Kokkos::LayoutLeft>);

// Row r of a 2-D view, indexable by [j].
template <class V>
KOKKOS_INLINE_FUNCTION auto row(V const& v, std::size_t r) {
  if constexpr (contiguous_rows<V>)
    return v.data() + r * v.stride(0);
  else
    return view_row<V>{v, r};
}

// The elements of a 1-D view, indexable by [j].
template <class V>
KOKKOS_INLINE_FUNCTION auto elements(V const& v) {
  if constexpr (contiguous_rows<V>)
    return v.data();
  else
    return view_row<V>{v, 0};
}

// f(j) for j in [0, n), spread over the team.
template <class Member, class F>
KOKKOS_INLINE_FUNCTION void row_for(Member const& team, std::size_t n, F const& f) {
  if (team.team_size() == 1) {
    SHARDMESH_HOST_SIMD("omp simd")
    for (std::size_t j = 0; j < n; ++j) f(j);
  } else {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), f);
  }
}

// The sum of f(j) for j in [0, n), the same on every thread of the team.
template <class Member, class F>
KOKKOS_INLINE_FUNCTION auto row_sum(Member const& team, std::size_t n, F const& f) {
  using T = decltype(f(std::size_t{0}));
  T total = 0;
  if (team.team_size() == 1) {
    SHARDMESH_HOST_SIMD("omp simd reduction(+ : total)")
    for (std::size_t j = 0; j < n; ++j) total += f(j);
  } else {
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, n), [&](std::size_t j, T& acc) { acc += f(j); }, total);
  }
  return total;
}

// The largest f(j) for j in [0, n), or the lowest value of its type when n is 0.
template <class Member, class F>
KOKKOS_INLINE_FUNCTION auto row_max(Member const& team, std::size_t n, F const& f) {
  using T = decltype(f(std::size_t{0}));
  T top = Kokkos::reduction_identity<T>::max();
  if (team.team_size() == 1) {
    SHARDMESH_HOST_SIMD("omp simd reduction(max : top)")
    for (std::size_t j = 0; j < n; ++j) top = Kokkos::max(top, f(j));
  } else {
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n), [&](std::size_t j, T& acc) { acc = Kokkos::max(acc, f(j)); },
        Kokkos::Max<T>(top));
  }
  return top;
}

}  // namespace shardmesh::ops::local::detail
