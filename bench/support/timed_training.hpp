#pragma once
// Training steps as the benchmarks time them, and how much of the gradient
// reductions' time a step leaves exposed: a step whose reductions start
// during backward (overlapped) measured beside the same step with every
// reduction after backward (sequential), alternately. The sequential step's
// wait for its reductions, which overlap nothing, is the communication
// time; the rest of it is the compute time; the exposed share is
// (overlapped - compute) / communication.

#include "max_over_ranks.hpp"
#include "rounds.hpp"

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <span>
#include <vector>

namespace shardmesh::bench {

struct timed_step_result {
  double seconds = 0;         // the slowest rank's step, started together at a barrier
  double loss = 0;            // the step's loss
  double reduction_wait = 0;  // the slowest rank's wait for the reductions after backward
};

template <class Trainer>
timed_step_result timed_step(Trainer& t, std::span<typename Trainer::micro_batch const> batch) {
  MPI_Barrier(MPI_COMM_WORLD);
  double const start = MPI_Wtime();
  auto const r = t.step(batch);
  double const seconds = max_over_ranks(MPI_Wtime() - start);
  return {seconds, r.loss, max_over_ranks(r.reduction_wait)};
}

class overlap_measurement {
 public:
  void add(double overlapped, timed_step_result const& sequential) {
    steps_.push_back(overlapped);
    sequentials_.push_back(sequential.seconds);
    communication_.push_back(sequential.reduction_wait);
  }

  // Medians over the steps added: step_ms, sequential_ms, communication_ms, compute_ms, exposed_share.
  void report(benchmark::State& state) const {
    double const step = median(steps_), sequential = median(sequentials_), communication = median(communication_);
    double const compute = sequential - communication;
    state.counters["step_ms"] = 1e3 * step;
    state.counters["sequential_ms"] = 1e3 * sequential;
    state.counters["communication_ms"] = 1e3 * communication;
    state.counters["compute_ms"] = 1e3 * compute;
    state.counters["exposed_share"] = communication > 0 ? std::max(0.0, step - compute) / communication : 0;
  }

 private:
  std::vector<double> steps_, sequentials_, communication_;
};

}  // namespace shardmesh::bench
