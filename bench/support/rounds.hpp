#pragma once
// Benchmarks run each case in rounds, all implementations of a case side by
// side in each round, so that a ratio compares runs made under the same
// load: SHARDMESH_BENCH_ROUNDS of them (default 1). Figures over a case's
// iterations are medians.

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <vector>

namespace shardmesh::bench {

inline std::size_t rounds() {
  char const* value = std::getenv("SHARDMESH_BENCH_ROUNDS");
  return value != nullptr ? std::max<std::size_t>(1, std::strtoul(value, nullptr, 10)) : 1;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace shardmesh::bench
