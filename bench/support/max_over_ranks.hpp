#pragma once
// Timing for benchmarks on MPI ranks: a transfer is as slow as its slowest
// rank, so each iteration reports the maximum over ranks as manual time.

#include <benchmark/benchmark.h>

#include <mpi.h>

#include <cstddef>

namespace shardmesh::bench {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline std::size_t world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return static_cast<std::size_t>(s);
}

// The largest of the ranks' values, on every rank.
inline double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

// Runs body() once per benchmark iteration between barriers and reports the
// slowest rank's time. Use with ->UseManualTime().
template <class Body>
void time_max_over_ranks(benchmark::State& state, Body&& body, MPI_Comm comm = MPI_COMM_WORLD) {
  for (auto _ : state) {
    MPI_Barrier(comm);
    double const start = MPI_Wtime();
    body();
    double const mine = MPI_Wtime() - start;
    double slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    state.SetIterationTime(slowest);
  }
}

}  // namespace shardmesh::bench
