#pragma once
// Parameter values and batches for the GPTs the benchmarks train:
// deterministic, drawn by the counter-based generator (parameter i of
// gpt_parameters' list, element j: 0.02 uniform(i, j) with seed 1; token
// ids of sample s of a step's global batch, position t: bits(s, t) with
// seed 2 and bits(s, sequence + t) for its target, modulo the vocabulary),
// so that bench/torch_training.py draws the same in numpy. Layer-norm gains
// are 1 and biases 0. Speed does not depend on the values; a step should
// not overflow.

#include <shardmesh/models/gpt.hpp>
#include <shardmesh/strategy/counter_random.hpp>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardmesh::bench {

inline parallel::parameter_source synthetic_values(parallel::gpt_config const& config) {
  return [declared = parallel::gpt_parameters(config)](std::string const& name) {
    std::vector<double> v;
    for (std::size_t i = 0; i < declared.size(); ++i) {
      if (declared[i].name != name) continue;
      v.assign(declared[i].elements(), name.ends_with("_g") ? 1.0 : 0.0);
      if (!name.ends_with("_g") && !name.ends_with("_b"))
        for (std::size_t j = 0; j < v.size(); ++j) v[j] = 0.02 * parallel::counter_random{1}.uniform(i, j);
    }
    return v;
  };
}

// Token ids (ids) and targets of samples [first, first + n) of the global
// batch sequence, [n, sequence] on the host.
struct synthetic_batch {
  Kokkos::View<int**, Kokkos::LayoutRight, Kokkos::HostSpace> ids, targets;
};

inline synthetic_batch synthetic_tokens(parallel::gpt_config const& config, std::size_t first, std::size_t n) {
  synthetic_batch b{{"ids", n, config.sequence}, {"targets", n, config.sequence}};
  parallel::counter_random const draw{2};
  for (std::size_t s = 0; s < n; ++s)
    for (std::size_t t = 0; t < config.sequence; ++t) {
      b.ids(s, t) = static_cast<int>(draw.bits(first + s, t) % config.vocabulary);
      b.targets(s, t) = static_cast<int>(draw.bits(first + s, config.sequence + t) % config.vocabulary);
    }
  return b;
}

}  // namespace shardmesh::bench
