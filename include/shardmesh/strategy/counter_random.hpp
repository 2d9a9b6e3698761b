#pragma once
// Random numbers as a pure function of a seed and counters (the stream,
// a step, a global index), as in counter-based generators (Philox,
// Threefry): a value never depends on the layout, the rank count or the
// order values are drawn in, and the generator has no state beyond its
// seed. Every rank draws exactly the values its shard needs, and a run
// resumed from a checkpoint (seed and step) draws what an uninterrupted run
// would. The mixing is splitmix64's finaliser, applied once per counter.

#include <cstdint>

namespace shardmesh::parallel {

// splitmix64's finaliser: a bijection of 64-bit integers that mixes every bit.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct counter_random {
  std::uint64_t seed = 0;

  // 64 random bits for the counters (a, b).
  [[nodiscard]] constexpr std::uint64_t bits(std::uint64_t a, std::uint64_t b) const {
    return mix64(mix64(mix64(seed) ^ a) ^ b);
  }
  // Uniform in [-1, 1), 52 random bits.
  [[nodiscard]] constexpr double uniform(std::uint64_t a, std::uint64_t b) const {
    return static_cast<double>(bits(a, b) >> 11) * 0x1.0p-52 - 1.0;
  }
};

}  // namespace shardmesh::parallel
