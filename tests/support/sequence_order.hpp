#pragma once
// Samples of a sequence split over cp ranks, moved between position order
// and the storage order of a sequence order (algebra/sequence_chunks.hpp):
// storage index t holds the token at ring_position(t). Values are
// [samples, T, width], width values per token (1 for token ids, the
// vocabulary for logits).

#include <shardmesh/algebra/sequence_chunks.hpp>

#include <cstddef>
#include <vector>

namespace shardmesh::test {

template <class V>
std::vector<V> reordered(std::vector<V> const& x, std::size_t samples, std::size_t T, std::size_t cp, sequence_order o,
                         bool to_storage) {
  std::size_t const width = x.size() / (samples * T);
  std::vector<V> out(x.size());
  for (std::size_t b = 0; b < samples; ++b)
    for (std::size_t t = 0; t < T; ++t) {
      std::size_t const stored = (b * T + t) * width, placed = (b * T + ring_position(t, T, cp, o)) * width;
      for (std::size_t e = 0; e < width; ++e)
        (to_storage ? out[stored + e] : out[placed + e]) = x[to_storage ? placed + e : stored + e];
    }
  return out;
}

}  // namespace shardmesh::test
