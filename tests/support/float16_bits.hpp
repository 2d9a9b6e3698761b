#pragma once
// The bits of a two-byte value (a bf16 or fp16 of any implementation), and
// back: what the 16-bit float tests compare.

#include <cstdint>
#include <cstring>

namespace shardmesh::test {

template <class T>
std::uint16_t bits(T x) {
  static_assert(sizeof(T) == 2);
  std::uint16_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

template <class T>
T from_bits(std::uint16_t b) {
  static_assert(sizeof(T) == 2);
  T x;
  std::memcpy(&x, &b, sizeof b);
  return x;
}

}  // namespace shardmesh::test
