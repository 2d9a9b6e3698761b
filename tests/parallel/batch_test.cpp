// Batch accounting: B_global = B_micro x N_acc x N_dp checked (at compile
// time for constants), and the uneven split's postconditions over a grid.
#include <shardmesh/strategy/batch.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <string>

using namespace shardmesh;
using parallel::batch_accounting;

TEST_CASE("an even batch derives B_global, at compile time when constant", "[parallel][batch]") {
  constexpr batch_accounting b(4, 2, 8);
  STATIC_REQUIRE(b.global() == 64);
  STATIC_REQUIRE(b.even());
  STATIC_REQUIRE(parallel::check_batch<64, 4, 2, 8>());
  STATIC_REQUIRE(batch_accounting(64, 4, 2, 8).micro() == 4);
  STATIC_REQUIRE(b.micro_step(1) == interval{32, 64});
  STATIC_REQUIRE(b.replica_share(1, 3) == interval{44, 48});
}

TEST_CASE("a batch that does not fit is an invalid_batch_error naming the numbers", "[parallel][batch]") {
  auto const message = [](auto&& make) {
    try {
      make();
    } catch (invalid_batch_error const& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([] { (void)batch_accounting(30, 4, 2, 4); }) ==
        "batch: a global batch of 30 is not B_micro x N_acc x N_dp = 4 x 2 x 4 = 32");
  CHECK(message([] { (void)batch_accounting(0, 2, 4); }) ==
        "batch: B_micro, N_acc and N_dp must be at least 1, not 0, 2 and 4");
  CHECK(message([] { (void)batch_accounting::uneven(2, 3, 4); }) ==
        "batch: a global batch of 2 cannot fill 3 micro-steps");
  CHECK(message([] { (void)batch_accounting::uneven(8, 2, 0); }) ==
        "batch: N_acc and N_dp must be at least 1, not 2 and 0");
}

TEST_CASE("10 samples on dp=4 with accumulation 2: 5 per micro-step, blocks 2, 2, 1, 0", "[parallel][batch]") {
  constexpr auto b = batch_accounting::uneven(10, 2, 4);
  STATIC_REQUIRE(!b.even());
  STATIC_REQUIRE(b.micro() == 2);
  STATIC_REQUIRE(b.micro_step(0) == interval{0, 5});
  STATIC_REQUIRE(b.micro_step(1) == interval{5, 10});
  STATIC_REQUIRE(b.replica_share(1, 0) == interval{5, 7});
  STATIC_REQUIRE(b.replica_share(1, 2) == interval{9, 10});
  STATIC_REQUIRE(b.replica_share(1, 3).size() == 0);
}

TEST_CASE("uneven splits tile the global batch in order, every sample taken once", "[parallel][batch]") {
  for (std::size_t global = 1; global <= 40; ++global)
    for (std::size_t acc = 1; acc <= std::min<std::size_t>(global, 6); ++acc)
      for (std::size_t dp = 1; dp <= 5; ++dp) {
        INFO("global " << global << ", accumulation " << acc << ", dp " << dp);
        batch_accounting const b = batch_accounting::uneven(global, acc, dp);
        REQUIRE(b.global() == global);
        std::size_t next = 0, smallest = global, largest = 0, share_max = 0;
        bool all_equal = true;
        for (std::size_t a = 0; a < acc; ++a) {
          interval const step = b.micro_step(a);
          REQUIRE(step.begin == next);
          smallest = std::min(smallest, step.size());
          largest = std::max(largest, step.size());
          std::size_t at = step.begin;
          for (std::size_t r = 0; r < dp; ++r) {
            interval const share = b.replica_share(a, r);
            REQUIRE(share.begin == at);
            at = share.end;
            share_max = std::max(share_max, share.size());
            all_equal = all_equal && share.size() == b.micro();
          }
          REQUIRE(at == step.end);
          next = step.end;
        }
        REQUIRE(next == global);
        REQUIRE(largest - smallest <= 1);
        REQUIRE(b.micro() == share_max);
        REQUIRE(b.even() == all_equal);
        if (global % (acc * dp) == 0) REQUIRE(b.even());
      }
}
