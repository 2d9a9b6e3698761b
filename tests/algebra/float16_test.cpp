// The host bf16 and fp16 conversions against the compiler's own __bf16 and
// _Float16 (IEEE 754 conversions, round to nearest even): every one of the
// 65536 16-bit patterns to float, and every 97th float pattern (both signs,
// all exponents: zeros, subnormals, ties, overflow, infinities, NaNs) to 16
// bits. NaN matches NaN whatever the payload.
#include "float16_bits.hpp"

#include <shardmesh/algebra/validation.hpp>

#include <catch2/catch_test_macros.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

using namespace shardmesh;

namespace {

template <class Compiler>
std::uint16_t compiler_bits(float f) {
  return test::bits(static_cast<Compiler>(f));
}

template <class Compiler>
float compiler_float(std::uint16_t b) {
  return static_cast<float>(test::from_bits<Compiler>(b));
}

bool is_nan16(std::uint16_t b, bool bf16) {
  return bf16 ? (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0 : (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
}

template <class Compiler, auto To>
std::string first_widening_miss() {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    auto const bits = static_cast<std::uint16_t>(b);
    float const want = compiler_float<Compiler>(bits), got = To(bits);
    bool const same =
        std::isnan(want) ? std::isnan(got) : std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want);
    if (!same) return "pattern " + std::to_string(b);
  }
  return "";
}

template <class Compiler, auto From>
std::string first_rounding_miss(bool bf16) {
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += 97) {
    float const f = std::bit_cast<float>(static_cast<std::uint32_t>(u));
    std::uint16_t const want = compiler_bits<Compiler>(f), got = From(f);
    bool const same = std::isnan(f) ? is_nan16(got, bf16) && (got & 0x8000u) == (want & 0x8000u) : got == want;
    if (!same) return "float pattern " + std::to_string(u);
  }
  return "";
}

}  // namespace

TEST_CASE("bf16 and fp16 widen to float exactly, every pattern", "[precision]") {
  CHECK(first_widening_miss<__bf16, detail::bf16_to_float>() == "");
  CHECK(first_widening_miss<_Float16, detail::fp16_to_float>() == "");
}

TEST_CASE("float rounds to bf16 and fp16 to nearest even, overflow and NaN included", "[precision]") {
  CHECK(first_rounding_miss<__bf16, detail::bf16_from_float>(true) == "");
  CHECK(first_rounding_miss<_Float16, detail::fp16_from_float>(false) == "");
  // Ties by hand: halfway between 1 and its next value goes to the even one, 1.
  CHECK(detail::bf16_from_float(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(detail::fp16_from_float(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(detail::fp16_from_float(65520.0f) == 0x7c00);  // the tie above the largest finite rounds to infinity
  CHECK(detail::fp16_from_float(65519.0f) == 0x7bff);
}

TEST_CASE("the host 16-bit types are 16-bit float elements, named bf16 and f16", "[precision]") {
  STATIC_CHECK(float16_element<detail::host_bf16>);
  STATIC_CHECK(float16_element<detail::host_fp16>);
  STATIC_CHECK_FALSE(float16_element<std::int16_t>);
  STATIC_CHECK(element_name<detail::host_bf16>() == "bf16");
  STATIC_CHECK(element_name<detail::host_fp16>() == "f16");
  STATIC_CHECK(static_cast<float>(detail::host_bf16(3)) == 3.0f);
  STATIC_CHECK(static_cast<double>(detail::host_fp16(-0.5)) == -0.5);
}
