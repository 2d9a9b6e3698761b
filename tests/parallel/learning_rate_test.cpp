// Learning-rate schedules: warm-up and cosine against their closed forms, as properties.

#include <shardmesh/strategy/learning_rate.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>

using namespace shardmesh;

TEST_CASE("warmup_cosine: linear warm-up, a half cosine down to the floor, the floor after", "[learning_rate]") {
  for (std::size_t warmup : {0, 1, 5})
    for (std::size_t total : {warmup + 1, warmup + 2, warmup + 10})
      for (double floor : {0.0, 0.1, 1.0}) {
        INFO("warmup " << warmup << ", total " << total << ", floor " << floor);
        auto const f = parallel::warmup_cosine(warmup, total, floor);
        for (std::size_t t = 1; t <= warmup; ++t) CHECK(f(t) == static_cast<double>(t) / static_cast<double>(warmup));
        if (warmup > 0) CHECK(f(warmup) == 1.0);
        double previous = 1.0;
        for (std::size_t t = warmup + 1; t <= total + 3; ++t) {
          double const x = static_cast<double>(std::min(t, total) - warmup) / static_cast<double>(total - warmup);
          CHECK(std::abs(f(t) - (floor + (1 - floor) * 0.5 * (1 + std::cos(std::numbers::pi * x)))) <= 1e-15);
          CHECK(f(t) <= previous);
          CHECK(f(t) >= floor);
          previous = f(t);
        }
        CHECK(f(total) == floor);
        if ((total - warmup) % 2 == 0) CHECK(std::abs(f(warmup + (total - warmup) / 2) - (1 + floor) / 2) <= 1e-15);
      }
}

TEST_CASE("warmup_cosine: a schedule that cannot be made is refused with its reason", "[learning_rate]") {
  using Catch::Matchers::Message;
  REQUIRE_THROWS_MATCHES(parallel::warmup_cosine(10, 10), invalid_option_error,
                         Message("learning rate: the cosine ends at update 10, not after the 10 updates of warm-up"));
  REQUIRE_THROWS_MATCHES(parallel::warmup_cosine(0, 10, 1.5), invalid_option_error,
                         Message("learning rate: the floor is 1.500000, which is not in [0, 1]"));
  REQUIRE_THROWS_MATCHES(parallel::warmup_cosine(0, 10, std::nan("")), invalid_option_error,
                         Message("learning rate: the floor is nan, which is not in [0, 1]"));
}
