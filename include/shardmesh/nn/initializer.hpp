#pragma once
// How a parameter's elements are made from their global row-major index,
// on the device and shard by shard (tensor/generate.hpp): a constant, or
// uniform in [-scale, scale) drawn from counter-based random numbers
// (strategy/counter_random.hpp) of a seed and a stream, element i at
// counter i. The values do not depend on the layout or the rank count, and
// equal the global tensor a parameter_source would build on every host:
//
//   [seed](parameter_spec const& p) {
//     if (p.name.ends_with("_g")) return initializer::constant(1);
//     return initializer::uniform(1 / std::sqrt(double(p.extents[0])), seed, stream_of(p.name));
//   }

#include "shardmesh/strategy/counter_random.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>

namespace shardmesh::parallel {

struct initializer {
  double value = 0;  // the constant; 0 for a uniform initializer
  double scale = 0;  // the uniform's half width; 0 for a constant
  std::uint64_t seed = 0, stream = 0;

  [[nodiscard]] static constexpr initializer constant(double v) { return {v, 0, 0, 0}; }
  [[nodiscard]] static constexpr initializer uniform(double scale, std::uint64_t seed, std::uint64_t stream) {
    return {0, scale, seed, stream};
  }

  // Element i's value.
  KOKKOS_FUNCTION double operator()(std::size_t i) const {
    return scale == 0 ? value : scale * counter_random{seed}.uniform(stream, i);
  }
};

}  // namespace shardmesh::parallel
