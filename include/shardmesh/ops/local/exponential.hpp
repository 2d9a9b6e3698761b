#pragma once
// e^x for the kernels' inner loops (GELU, SiLU, softmax, cross-entropy).
// On the host, a float e^x in plain arithmetic, so that the compiler
// vectorises the loop around it: the C library's expf is a call the loop
// makes element by element (GELU's forward and backward were a tenth of a
// training step). x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two
// parts, Cody and Waite, so that r is exact), e^r by Cephes's degree-6
// polynomial, 2^n put into the exponent bits: within 2 ulp of e^x. Below
// -87.3 the result is 0 (expf's subnormals end at -103.9), above 88.37
// +inf (expf's at 88.72), NaN stays NaN. Doubles, and every device (whose
// exp is an instruction), use Kokkos::exp.

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

namespace shardmesh::ops::local {

namespace detail {
KOKKOS_INLINE_FUNCTION float host_expf(float x) {
  constexpr float log2e = 1.44269504088896341F;
  constexpr float ln2_high = 0.693359375F, ln2_low = -2.12194440e-4F;
  constexpr float lowest = -87.3F, highest = 88.37F;  // 2^n stays a normal float
  constexpr float round = 12582912.0F;                // 1.5 * 2^23: adding it rounds to an integer, n in the low bits
  float const shifted = x * log2e + round;
  float const n = shifted - round;
  float const r = (x - n * ln2_high) - n * ln2_low;
  float p = 1.9875691500e-4F;
  p = p * r + 1.3981999507e-3F;
  p = p * r + 8.3334519073e-3F;
  p = p * r + 4.1665795894e-2F;
  p = p * r + 1.6666665459e-1F;
  p = p * r + 5.0000001201e-1F;
  float const er = p * r * r + r + 1.0F;
  std::uint32_t const scale = (Kokkos::bit_cast<std::uint32_t>(shifted) - 0x4B400000U + 127U) << 23;  // 2^n
  auto y = Kokkos::bit_cast<std::uint32_t>(er * Kokkos::bit_cast<float>(scale));
  // Out of range and NaN by masks, not by branches or float selects: GCC
  // would branch on those, and (floating point may trap) not vectorise.
  std::uint32_t const under = 0U - static_cast<std::uint32_t>(x < lowest);
  std::uint32_t const over = 0U - static_cast<std::uint32_t>(x > highest);
  std::uint32_t const nan = 0U - static_cast<std::uint32_t>(x != x);
  y = (y & ~(under | over | nan)) | (over & 0x7F800000U) | (nan & Kokkos::bit_cast<std::uint32_t>(x));
  return Kokkos::bit_cast<float>(y);
}
}  // namespace detail

template <class T>
KOKKOS_INLINE_FUNCTION T exponential(T x) {
  if constexpr (std::is_same_v<T, float>) {
    KOKKOS_IF_ON_HOST((return detail::host_expf(x);))
    KOKKOS_IF_ON_DEVICE((return Kokkos::exp(x);))
  } else {
    return Kokkos::exp(x);
  }
}

}  // namespace shardmesh::ops::local
