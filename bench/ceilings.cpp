// Ceilings that every transfer is compared with: one rank's memory copy
// bandwidth (Kokkos::deep_copy of a contiguous buffer) and the raw bandwidth
// of MPI_Alltoall over all ranks for the same bytes per rank.
#include "max_over_ranks.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace {

using shardmesh::bench::time_max_over_ranks;

void memcpy_ceiling(benchmark::State& state) {
  auto const bytes = static_cast<std::size_t>(state.range(0));
  Kokkos::View<std::byte*> source("source", bytes);
  Kokkos::View<std::byte*> target("target", bytes);
  time_max_over_ranks(state, [&] {
    Kokkos::deep_copy(target, source);
    Kokkos::fence();
  });
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
}

void alltoall_ceiling(benchmark::State& state) {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  auto const block = static_cast<std::size_t>(state.range(0)) / static_cast<std::size_t>(ranks);
  auto const bytes = block * static_cast<std::size_t>(ranks);
  Kokkos::View<std::byte*, Kokkos::HostSpace> source("source", bytes);
  Kokkos::View<std::byte*, Kokkos::HostSpace> target("target", bytes);
  time_max_over_ranks(state, [&] {
    MPI_Alltoall(source.data(), static_cast<int>(block), MPI_BYTE, target.data(), static_cast<int>(block), MPI_BYTE,
                 MPI_COMM_WORLD);
  });
  // Bytes that leave each rank: all blocks but its own.
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes - block));
}

}  // namespace

BENCHMARK(memcpy_ceiling)->RangeMultiplier(4)->Range(64 << 10, 64 << 20)->UseManualTime();
BENCHMARK(alltoall_ceiling)->RangeMultiplier(4)->Range(64 << 10, 64 << 20)->UseManualTime();
