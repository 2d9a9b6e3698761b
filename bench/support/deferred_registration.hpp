#pragma once
// Benchmarks whose list depends on the run (its number of ranks) register
// once MPI is up: a benchmark file adds its registration function here at
// static initialisation, and the MPI benchmark main calls them all.

#include <vector>

namespace shardmesh::bench {

inline std::vector<void (*)()>& deferred_registrations() {
  static std::vector<void (*)()> all;
  return all;
}

}  // namespace shardmesh::bench
