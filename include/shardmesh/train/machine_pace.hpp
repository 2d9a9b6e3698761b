#pragma once
// The machine's pace, for telling a shared machine's slow spells apart in
// measurements: the seconds of the same fixed work, about half a
// millisecond of arithmetic in cache, on every rank at once. A machine
// shared with others can run a core up to twice as slow for seconds at a
// time (a virtual machine's neighbours on the same physical core); a
// measurement whose pace, taken before and after it, is near the fastest
// pace seen ran on the machine left alone. shardmesh-calibrate --pace
// prints it; examples/train_gpt --report records it around every step.

#include <shardmesh/comm/communicator.hpp>

#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <vector>

namespace shardmesh::parallel {

// A measurement is taken on the machine left alone when the pace around it
// is within this of the fastest pace seen (measured on a shared 2-core
// machine: within 1.25x when left alone, beyond 1.5x in a slow spell).
inline constexpr double quiet_pace = 1.3;

// Collective: the slowest rank's seconds for the fixed work, the same on every rank.
[[nodiscard]] inline double machine_pace(communicator const& world) {
  static std::vector<float> x(std::size_t{1} << 12, 0.5f);
  MPI_Barrier(world.get());
  double const start = MPI_Wtime();
  for (int round = 0; round < 16; ++round)
    for (float& v : x) v = v / (1.0f + std::exp(-v)) + 0.25f;  // stays in (0.25, 1): the same work every call
  double seconds = MPI_Wtime() - start;
  MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, world.get());
  return seconds;
}

}  // namespace shardmesh::parallel
