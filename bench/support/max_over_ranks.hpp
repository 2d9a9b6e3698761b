#pragma once
// Timing for benchmarks on MPI ranks: a transfer is as slow as its slowest
// rank, so each iteration reports the maximum over ranks as manual time.

#include <benchmark/benchmark.h>

#include <mpi.h>

namespace shardmesh::bench {

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
