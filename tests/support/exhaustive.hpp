#pragma once
// Whether a test checks every case of a large space or a fixed stride of
// them: the default suite samples, the full suite (tools/test full) sets
// SHARDMESH_EXHAUSTIVE=1 and checks every case. The same on every rank.

#include <cstddef>
#include <cstdlib>
#include <string_view>

namespace shardmesh::test {

inline bool exhaustive() {
  char const* const value = std::getenv("SHARDMESH_EXHAUSTIVE");
  return value != nullptr && std::string_view(value) == "1";
}

// Every case when exhaustive, else every `sampled`-th.
inline std::size_t case_stride(std::size_t sampled) { return exhaustive() ? 1 : sampled; }

}  // namespace shardmesh::test
