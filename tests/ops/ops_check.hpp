#pragma once
// Helpers of the sharded-op tests: global arrays on the host, distributed in
// a layout and gathered back, compared with a stated tolerance.

#include "mpi_test.hpp"
#include "serial_einsum.hpp"

#include <shardmesh/shardmesh.hpp>

#include <Kokkos_Core.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstddef>
#include <vector>

namespace shardmesh::test {

template <std::size_t Rank>
using host_tensor =
    Kokkos::View<typename shardmesh::detail::view_data<double, Rank>::type, Kokkos::LayoutRight, Kokkos::HostSpace>;

// Deterministic values in [-1, 1), different for each salt.
inline std::vector<double> pseudo_random(std::size_t n, std::size_t salt) {
  std::vector<double> v(n);
  std::uint64_t s = 0x9e3779b97f4a7c15ULL * (salt + 1);
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<double>(s % 2000) / 1000.0 - 1.0;
  }
  return v;
}

template <std::size_t Rank>
host_tensor<Rank> host_of(tensor_index const& e, std::vector<double> const& values) {
  host_tensor<Rank> h = shardmesh::detail::allocate<host_tensor<Rank>>("global", e);
  for (std::size_t i = 0; i < values.size(); ++i) h.data()[i] = values[i];
  return h;
}

template <std::size_t Rank>
dynamic_dtensor<double, Rank, Kokkos::HostSpace> make(device_mesh const& mesh, layout const& l, tensor_index const& e,
                                                      std::vector<double> const& values) {
  return distribute<Kokkos::HostSpace>(mesh, l, host_of<Rank>(e, values));
}

template <class T, std::size_t Rank, class M>
std::vector<double> values_of(dynamic_dtensor<T, Rank, M> const& x) {
  auto const g = gather(x);
  return std::vector<double>(g.data(), g.data() + g.size());
}

inline void require_close(std::vector<double> const& got, std::vector<double> const& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= tolerance * (1 + std::abs(want[i])));
  }
}

// Collective calls and bytes on a mesh since the last reset, by kind.
inline std::uint64_t calls(device_mesh const& mesh, char const* kind) { return mesh.counters()[kind].calls; }

}  // namespace shardmesh::test
