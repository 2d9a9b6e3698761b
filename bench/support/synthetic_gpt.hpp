#pragma once
// Parameter values for the GPTs the benchmarks train: deterministic, small
// (|w| <= 0.02), layer-norm gains 1 and biases 0. Their speed does not
// depend on the values; a step should not overflow.

#include <shardmesh/models/gpt.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace shardmesh::bench {

inline parallel::parameter_source synthetic_values(parallel::gpt_config const& config) {
  return [declared = parallel::gpt_parameters(config)](std::string const& name) {
    parallel::parameter_spec const* p = parallel::find_parameter(declared, name);
    std::vector<double> v(p != nullptr ? p->elements() : 0, name.ends_with("_g") ? 1.0 : 0.0);
    if (!name.ends_with("_g") && !name.ends_with("_b"))
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.02 * static_cast<double>(i * 7919 % 201) / 100.0 - 0.02;
    return v;
  };
}

}  // namespace shardmesh::bench
