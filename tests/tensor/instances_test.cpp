// Every operation runs its kernels on the execution-space instance it is
// given and fences only that instance: Kokkos Tools records each kernel's
// and each fence's device id. Two instances come from partition_space.
// Where instances have ids of their own (CUDA and HIP streams) this tells
// them apart; Kokkos 5.2's OpenMP gives every instance the same id, so here
// the test still tells instance fences from global ones, and runs the
// operations on a partitioned instance.
#include "host_matrix.hpp"
#include "kernel_recording.hpp"
#include "mpi_test.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace instances_test {

using namespace shardmesh;

namespace {

using space = Kokkos::DefaultExecutionSpace;
using test::equal;
using test::host_matrix;
using test::numbered;

using test::recording;
using test::two_instances;
auto& kernels = test::recorded_kernels;
auto& fences = test::recorded_fences;

// Counts the recorded events on `device`, and those on any other.
struct tally {
  std::size_t on = 0;
  std::size_t elsewhere = 0;
};
tally count(std::vector<test::kokkos_event> const& events, std::uint32_t device, std::string const& prefix) {
  tally t;
  for (auto const& e : events)
    if (e.name.rfind(prefix, 0) == 0) (e.device == device ? t.on : t.elsewhere) += 1;
  return t;
}

// Writes x's shard as f(global row, column) = row * n + column on exec, without waiting.
struct fill_rows {
  Kokkos::View<double**, Kokkos::LayoutRight, space::memory_space> local;
  std::size_t first_row;
  std::size_t n;
  KOKKOS_FUNCTION void operator()(std::size_t i) const {
    for (std::size_t j = 0; j < local.extent(1); ++j) local(i, j) = static_cast<double>((first_row + i) * n + j);
  }
};

}  // namespace

TEST_CASE("operations run their kernels on the given instance and fence only it", "[tensor][instances]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  auto const instances = two_instances();
  space const& mine = instances[1];
  std::uint32_t const here = Kokkos::Tools::Experimental::device_id(mine);

  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  constexpr layout rows{shard("x"), replicated};
  constexpr layout cols{replicated, cyclic(2, "x")};  // unpacking needs a kernel even on one rank
  std::size_t const n = 4 * ranks + 3;
  host_matrix const global = numbered(n);
  auto const x = distribute<rows>(mesh, global, all_ranks, mine);
  {
    recording const r;
    auto const y = redistribute<cols>(x, mine);
    auto pending = redistribute_async<rows>(y, mine);
    auto const z = pending.get();
    auto into = distribute<cols>(mesh, global, all_ranks, mine);
    redistribute(z, into, mine);
    redistributor const again(z, cols);
    again(z, into, mine);
    REQUIRE(equal(gather(z, all_ranks, mine), global));
    tally const k = count(kernels, here, "shardmesh::");
    CHECK(k.on > 0);
    CHECK(k.elsewhere == 0);
    tally const f = count(fences, here, "shardmesh::");
    CHECK(f.on > 0);
    CHECK(f.elsewhere == 0);
    // Nothing else fenced another instance, or all of them (a deep_copy or
    // Kokkos::fence without an instance would), except what Kokkos itself
    // does when a View is freed or a tool is listening.
    for (auto const& e : fences) {
      bool const kokkos_own =
          e.name.find("impl_deallocate") != std::string::npos || e.name.find("Profile Tool Fence") != std::string::npos;
      INFO("fence " << e.name);
      CHECK((kokkos_own || e.device == here));
    }
  }
}

TEST_CASE("a shard still being written on the instance is read only after it finishes", "[tensor][instances]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  auto const instances = two_instances();
  space const& mine = instances[0];
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  constexpr layout rows{shard("x"), replicated};
  constexpr layout cols{replicated, shard("x")};
  std::size_t const n = 64 * ranks + 5;
  tensor_index const e = local_extents(mesh.shape(), bind(mesh.shape(), rows), {n, n}, mesh.rank());
  Kokkos::View<double**, Kokkos::LayoutRight, space::memory_space> local(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "x"), e[0], e[1]);
  std::size_t const first = block_interval(mesh.shape(), bind(mesh.shape(), rows).dims[0], n, mesh.coordinates()).begin;
  for (int round = 0; round < 3; ++round) {
    Kokkos::deep_copy(local, -1.0);
    Kokkos::parallel_for("fill", Kokkos::RangePolicy<space, Kokkos::IndexType<std::size_t>>(mine, 0, e[0]),
                         fill_rows{local, first, n});
    // No fence: the redistribution must order itself after the kernel on `mine`.
    dtensor<double, rows> const x(mesh, {n, n}, local);
    auto const y = redistribute<cols>(x, mine);
    REQUIRE(equal(gather(y, all_ranks, mine), numbered(n)));
  }
}

}  // namespace instances_test
