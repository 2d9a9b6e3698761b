// The counter-based generator: splitmix64's published values, a pure
// function of its counters, and uniform values in [-1, 1) that do not
// depend on the order they are drawn in.
#include <shardmesh/strategy/counter_random.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <set>

using shardmesh::parallel::counter_random;
using shardmesh::parallel::mix64;

TEST_CASE("mix64 is splitmix64's output function", "[random]") {
  // splitmix64 from state 0: its first two outputs (Steele, Lea and Flood 2014; Vigna's reference code).
  STATIC_REQUIRE(mix64(0) == 0xe220a8397b1dcdafULL);
  STATIC_REQUIRE(mix64(0x9e3779b97f4a7c15ULL) == 0x6e789e6aa1b965f4ULL);
}

TEST_CASE("counter_random: values depend on the seed and counters only", "[random]") {
  counter_random const a{7}, b{8};
  STATIC_REQUIRE(counter_random{7}.bits(3, 4) == counter_random{7}.bits(3, 4));
  std::set<std::uint64_t> seen;
  double low = 1, high = -1, sum = 0;
  constexpr int n = 20000;
  for (std::uint64_t i = n; i-- > 0;) {  // drawn backwards: the order does not matter
    seen.insert(a.bits(1, i));
    double const u = a.uniform(1, i);
    low = u < low ? u : low;
    high = u > high ? u : high;
    sum += u;
  }
  CHECK(seen.size() == n);  // no repeats over the counters
  CHECK(low >= -1.0);
  CHECK(high < 1.0);
  CHECK(low < -0.99);
  CHECK(high > 0.99);
  CHECK(sum / n > -0.02);  // mean 0, standard error 0.004
  CHECK(sum / n < 0.02);
  CHECK(a.bits(1, 5) != b.bits(1, 5));
  CHECK(a.bits(1, 5) != a.bits(2, 5));
  CHECK(a.bits(1, 5) != a.bits(5, 1));
}
