#pragma once
// Whole matrices on the host, for tests that distribute one and compare
// what they gather with it.

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace shardmesh::test {

using host_matrix = Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>;

// An n x n matrix whose elements are 0, 1, 2, ... in row-major order.
inline host_matrix numbered(std::size_t n) {
  host_matrix m("global", n, n);
  for (std::size_t i = 0; i < m.size(); ++i) m.data()[i] = static_cast<double>(i);
  return m;
}

inline bool equal(host_matrix const& a, host_matrix const& b) {
  if (a.extent(0) != b.extent(0) || a.extent(1) != b.extent(1)) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
}

}  // namespace shardmesh::test
