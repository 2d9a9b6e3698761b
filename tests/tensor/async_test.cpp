// redistribute_async returns while the data moves; a Kokkos kernel runs in
// the meantime, and both results are checked.
#include "mpi_test.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace async_test {

using namespace shardmesh;

namespace {

// Sum of i over [0, n), computed while a redistribution is in flight.
struct index_sum {
  KOKKOS_FUNCTION void operator()(std::int64_t i, std::int64_t& sum) const { sum += i; }
};

}  // namespace

TEST_CASE("a redistribution overlaps with a Kokkos kernel", "[tensor][async]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  constexpr layout rows{shard("x"), replicated};
  constexpr layout cols{replicated, shard("x")};
  std::size_t const n = 64 * ranks;
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> global("global", n, n);
  for (std::size_t i = 0; i < global.size(); ++i) global.data()[i] = static_cast<double>(i);
  auto const x = distribute<rows>(mesh, global);

  auto pending = redistribute_async<cols>(x);
  std::int64_t sum = 0;
  std::int64_t const m = 1 << 20;
  Kokkos::parallel_reduce("overlapped", Kokkos::RangePolicy<Kokkos::IndexType<std::int64_t>>(0, m), index_sum{}, sum);
  pending.test();  // progress, without blocking
  dtensor<double, cols> const y = pending.get();

  REQUIRE(sum == m * (m - 1) / 2);
  REQUIRE(y.layout() == cols);
  auto const back = gather(y);
  for (std::size_t i = 0; i < global.size(); ++i) REQUIRE(back.data()[i] == global.data()[i]);
  REQUIRE(pending.plan().size() == (ranks == 1 ? 0 : 1));
}

TEST_CASE("several redistributions can be in flight at once", "[tensor][async]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> global("global", 3 * ranks + 1, 5);
  for (std::size_t i = 0; i < global.size(); ++i) global.data()[i] = static_cast<int>(i);
  auto const x = distribute<layout{shard("x"), replicated}>(mesh, global);
  auto first = redistribute_async<layout{replicated, replicated}>(x);
  auto second = redistribute_async<layout{replicated, shard("x")}>(x);
  auto const a = gather(second.get());
  auto const b = first.get();
  auto const whole = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, b.local());
  for (std::size_t i = 0; i < global.size(); ++i) {
    REQUIRE(a.data()[i] == global.data()[i]);
    REQUIRE(whole.data()[i] == global.data()[i]);
  }
}

}  // namespace async_test
