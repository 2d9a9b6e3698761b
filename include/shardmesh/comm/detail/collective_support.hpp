#pragma once
// What every collective wrapper needs: MPI's int counts and displacements,
// and the bookkeeping of one call (profiling region, counters).

#include "shardmesh/comm/counters.hpp"

#include <Kokkos_Core.hpp>

#include <climits>
#include <cstddef>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::detail {

inline int mpi_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::length_error("shardmesh: " + std::to_string(n) + " elements exceed an MPI count (INT_MAX)");
  return static_cast<int>(n);
}

inline std::vector<int> mpi_counts(std::vector<std::size_t> const& counts) {
  std::vector<int> out;
  out.reserve(counts.size());
  for (std::size_t c : counts) out.push_back(mpi_count(c));
  return out;
}

// Exclusive prefix sums: where each peer's block starts when blocks lie one after another.
inline std::vector<std::size_t> offsets(std::vector<std::size_t> const& counts) {
  std::vector<std::size_t> out(counts.size(), 0);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out[i] = offset;
    offset += counts[i];
  }
  return out;
}

inline std::vector<int> displacements(std::vector<std::size_t> const& counts) { return mpi_counts(offsets(counts)); }

inline std::size_t sum_except(std::vector<std::size_t> const& counts, std::size_t skip) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0}) - counts[skip];
}

// MPI reads the count and displacement arrays of a non-blocking collective
// until it completes: they live on the heap, owned by the request.
using kept_ints = std::shared_ptr<std::vector<int> const>;
inline kept_ints keep(std::vector<int> values) { return std::make_shared<std::vector<int> const>(std::move(values)); }

// Records a call of `name` moving `sent` and `received` elements of T.
template <class T>
void count_call(char const* name, std::size_t sent, std::size_t received) {
  counters().record(name, sent * sizeof(T), received * sizeof(T));
}

}  // namespace shardmesh::detail
