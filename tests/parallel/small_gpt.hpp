#pragma once
// The small GPT of the parallel tests: sizes that split unevenly over up to
// 4 ranks (vocabulary 50, 3 heads, MLP 18, hidden 10), and the reference's
// parameters (or gradients) by name.

#include "reference_gpt.hpp"

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace shardmesh::test {

inline reference::config small_gpt(std::size_t batch, std::size_t sequence) {
  reference::config c;
  c.V = 50;
  c.T = sequence;
  c.C = 10;
  c.H = 3;
  c.D = 4;
  c.F = 18;
  c.L = 2;
  c.B = batch;
  return c;
}

inline std::map<std::string, std::vector<double>> by_name(reference::config const& c, reference::parameters const& p) {
  std::map<std::string, std::vector<double>> out;
  reference::for_each_parameter(
      c, p, [&](std::string const& name, std::vector<double> const& v, auto const&) { out[name] = v; });
  return out;
}

}  // namespace shardmesh::test
