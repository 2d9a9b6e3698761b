// The transition users ask about most: an N x N float32 matrix moved from
// rows sharded to columns sharded over all ranks, by shardmesh's
// redistribute and by hand (a Kokkos pack kernel, MPI_Alltoall, a Kokkos
// unpack kernel), in the same binary so that the figures are ratios.
#include "max_over_ranks.hpp"

#include <shardmesh/shardmesh.hpp>

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace {

using namespace shardmesh;
using shardmesh::bench::time_max_over_ranks;
using matrix = Kokkos::View<float**, Kokkos::LayoutRight>;

constexpr layout rows{shard("x"), replicated};
constexpr layout cols{replicated, shard("x")};

std::size_t world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return static_cast<std::size_t>(size);
}

// Bytes of the whole matrix that change owner: all but the diagonal blocks.
void report(benchmark::State& state, std::size_t n, std::size_t ranks) {
  std::size_t const moved = n * n * sizeof(float) * (ranks - 1) / ranks;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(moved));
  state.counters["global_MiB"] = static_cast<double>(n * n * sizeof(float)) / (1 << 20);
}

void shardmesh_redistribute(benchmark::State& state) {
  auto const n = static_cast<std::size_t>(state.range(0));
  std::size_t const ranks = world_size();
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  dtensor<float, rows> const x(mesh, {n, n}, matrix("x", n / ranks, n));
  time_max_over_ranks(state, [&] {
    dtensor<float, cols> const y = redistribute<cols>(x);
    benchmark::DoNotOptimize(y.local().data());
  });
  report(state, n, ranks);
}

void hand_written_alltoall(benchmark::State& state) {
  auto const n = static_cast<std::size_t>(state.range(0));
  std::size_t const ranks = world_size();
  std::size_t const b = n / ranks;  // block edge
  matrix const in("in", b, n);
  matrix const out("out", n, b);
  Kokkos::View<float*> send("send", b * n);
  Kokkos::View<float*> recv("recv", b * n);
  time_max_over_ranks(state, [&] {
    // Block q of send: my rows x q's columns, row-major.
    Kokkos::parallel_for(
        "pack", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {b, n}), KOKKOS_LAMBDA(std::size_t i, std::size_t j) {
          std::size_t const q = j / b;
          send(q * b * b + i * b + j % b) = in(i, j);
        });
    Kokkos::fence();
    MPI_Alltoall(send.data(), static_cast<int>(b * b), MPI_FLOAT, recv.data(), static_cast<int>(b * b), MPI_FLOAT,
                 MPI_COMM_WORLD);
    // Block q of recv: q's rows x my columns.
    Kokkos::parallel_for(
        "unpack", Kokkos::MDRangePolicy<Kokkos::Rank<2>>({0, 0}, {n, b}),
        KOKKOS_LAMBDA(std::size_t i, std::size_t j) { out(i, j) = recv((i / b) * b * b + (i % b) * b + j); });
    Kokkos::fence();
  });
  report(state, n, ranks);
}

}  // namespace

BENCHMARK(shardmesh_redistribute)->RangeMultiplier(2)->Range(512, 4096)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(hand_written_alltoall)->RangeMultiplier(2)->Range(512, 4096)->UseManualTime()->Unit(benchmark::kMillisecond);
