#pragma once
// A serial product in index notation over row-major arrays, element by
// element: the reference sharded products are checked against.

#include <shardmesh/algebra/contraction.hpp>
#include <shardmesh/algebra/shard_geometry.hpp>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

namespace shardmesh::test {

// A tensor_index from a list: extents({2, 8, 16}).
inline tensor_index extents(std::initializer_list<std::size_t> e) {
  tensor_index out{};
  std::size_t d = 0;
  for (std::size_t x : e) out[d++] = x;
  return out;
}

inline std::size_t count_of(tensor_index const& e, std::size_t rank) {
  std::size_t n = 1;
  for (std::size_t d = 0; d < rank; ++d) n *= e[d];
  return n;
}

inline std::size_t flat(tensor_index const& e, tensor_index const& i, std::size_t rank) {
  std::size_t f = 0;
  for (std::size_t d = 0; d < rank; ++d) f = f * e[d] + i[d];
  return f;
}

// C[c] += A[a] * B[b] over every combination of the labels' extents.
inline std::vector<double> einsum(contraction const& k, std::vector<double> const& a, tensor_index const& ea,
                                  std::vector<double> const& b, tensor_index const& eb, tensor_index& ec) {
  std::string labels;
  std::vector<std::size_t> extent;
  for (std::size_t i = 0; i < k.a.size(); ++i) labels += k.a.chars[i], extent.push_back(ea[i]);
  for (std::size_t i = 0; i < k.b.size(); ++i)
    if (labels.find(k.b.chars[i]) == std::string::npos) labels += k.b.chars[i], extent.push_back(eb[i]);
  for (std::size_t i = 0; i < k.c.size(); ++i) ec[i] = extent[labels.find(k.c.chars[i])];
  std::vector<double> c(count_of(ec, k.c.size()), 0.0);
  std::vector<std::size_t> at(labels.size(), 0);
  auto const index = [&](contraction::labels const& of) {
    tensor_index i{};
    for (std::size_t d = 0; d < of.size(); ++d) i[d] = at[labels.find(of.chars[d])];
    return i;
  };
  for (std::size_t e : extent)
    if (e == 0) return c;
  while (true) {
    c[flat(ec, index(k.c), k.c.size())] += a[flat(ea, index(k.a), k.a.size())] * b[flat(eb, index(k.b), k.b.size())];
    std::size_t d = 0;
    for (; d < at.size() && ++at[d] == extent[d]; ++d) at[d] = 0;
    if (d == at.size()) return c;
  }
}

}  // namespace shardmesh::test
