#pragma once
// bf16 and fp16 as storage types on the host: two bytes each, converted to
// and from float exactly as IEEE 754 (round to nearest, ties to even;
// overflow to infinity; subnormals kept; NaN stays NaN), in plain integer
// and float arithmetic without branches, so that loops over them
// vectorise. Arithmetic happens in float: these types have none of their
// own but equality. (The compiler's __bf16 and _Float16 convert through a library call
// per element unless the target has the instructions; Kokkos's half_t and
// bhalf_t are float itself on host-only builds.)

#include <bit>
#include <concepts>
#include <cstdint>
#include <type_traits>

namespace shardmesh::detail {

// bf16: float's upper half. Rounding adds 0x7fff plus the kept part's
// lowest bit, so a tie goes to the even neighbour; a NaN keeps its sign and
// top payload bits with the quiet bit set (the rounding could carry it into
// an infinity).
[[nodiscard]] constexpr std::uint16_t bf16_from_float(float f) {
  auto const u = std::bit_cast<std::uint32_t>(f);
  auto const rounded = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  auto const quiet = static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded;
}
[[nodiscard]] constexpr float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// fp16 to float: the 15 bits of exponent and fraction moved to float's
// place and scaled by 2^(127 - 15) (which also normalises subnormals);
// exponent 31 (infinity, NaN) maps to float's 255 instead.
[[nodiscard]] constexpr float fp16_to_float(std::uint16_t h) {
  std::uint32_t const magnitude = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  std::uint32_t const scaled = std::bit_cast<std::uint32_t>(std::bit_cast<float>(magnitude) * 0x1p112f);
  std::uint32_t const special = magnitude | 0x7f800000u;
  std::uint32_t const sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  return std::bit_cast<float>(sign | ((h & 0x7fffu) >= 0x7c00u ? special : scaled));
}

// float to fp16, three ranges by magnitude: from 65520 up, infinity (NaN
// stays NaN); under 2^-14, the subnormals, rounded by the float addition
// of 0.5 (whose spacing there is fp16's subnormal spacing, 2^-24); between,
// the exponent rebiased and the fraction rounded by adding 0xfff plus the
// kept part's lowest bit (a carry may reach the next exponent, or infinity).
[[nodiscard]] constexpr std::uint16_t fp16_from_float(float f) {
  auto const u = std::bit_cast<std::uint32_t>(f);
  std::uint32_t const sign = (u >> 16) & 0x8000u;
  std::uint32_t const magnitude = u & 0x7fffffffu;
  std::uint32_t const overflow = magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u;
  std::uint32_t const subnormal =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(magnitude) + 0.5f) - std::bit_cast<std::uint32_t>(0.5f);
  std::uint32_t const normal = (magnitude - (112u << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  std::uint32_t const out = magnitude >= 0x47800000u ? overflow : magnitude < 0x38800000u ? subnormal : normal;
  return static_cast<std::uint16_t>(sign | out);
}

template <class U>
concept real_number = std::is_arithmetic_v<U>;

// A 16-bit float held as its bits, converting with From and To.
template <std::uint16_t (*From)(float), float (*To)(std::uint16_t)>
struct float16_storage {
  std::uint16_t bits;

  float16_storage() = default;
  constexpr explicit float16_storage(float f) : bits(From(f)) {}
  // Other numbers through float (a double is rounded twice: to float, then to 16 bits).
  template <real_number U>
    requires(!std::same_as<U, float>)
  constexpr explicit float16_storage(U x) : float16_storage(static_cast<float>(x)) {}
  constexpr explicit operator float() const { return To(bits); }
  // As floats compare: NaN equals nothing, -0 equals +0.
  friend constexpr bool operator==(float16_storage a, float16_storage b) { return To(a.bits) == To(b.bits); }
  template <real_number U>
    requires(!std::same_as<U, float>)
  constexpr explicit operator U() const {
    return static_cast<U>(To(bits));
  }
};

using host_bf16 = float16_storage<bf16_from_float, bf16_to_float>;
using host_fp16 = float16_storage<fp16_from_float, fp16_to_float>;

}  // namespace shardmesh::detail
