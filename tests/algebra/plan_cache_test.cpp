// The plan cache: one plan per transition, the planner's own, bounded, and
// an error (not an empty plan) for a transition the planner cannot make.
#include <shardmesh/algebra/plan_cache.hpp>
#include <shardmesh/detail/lru_cache.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <atomic>
#include <thread>
#include <vector>

using namespace shardmesh;
using Catch::Matchers::ContainsSubstring;

TEST_CASE("a plan cache makes each plan once and returns the planner's plan", "[algebra][plan_cache]") {
  mesh_shape const mesh{{"dp", 2}, {"tp", 2}};
  plan_cache cache(mesh, cost_model{4});
  bound_layout const rows = bind(mesh, layout{shard("tp"), replicated});
  bound_layout const cols = bind(mesh, layout{replicated, shard("tp")});
  auto const first = cache.get(rows, cols);
  REQUIRE(cache.get(rows, cols) == first);  // the same object: made once
  REQUIRE(cache.size() == 1);
  redistribution_plan const direct = plan_redistribution(mesh, rows, cols, cost_model{4});
  REQUIRE(first->size() == direct.size());
  for (std::size_t i = 0; i < direct.size(); ++i) REQUIRE((*first)[i] == direct[i]);
  REQUIRE(cache.get(cols, rows) != first);
  REQUIRE(cache.size() == 2);
  REQUIRE(cache.get(rows, rows)->size() == 0);  // already there
  REQUIRE(cache.model().alpha_per_1024 == 4);
}

TEST_CASE("a plan cache raises an error for a transition the planner cannot make", "[algebra][plan_cache]") {
  mesh_shape const mesh{{"tp", 2}};
  plan_cache cache(mesh);
  // A target both sharded and partial on one axis: the algebra rejects it,
  // and no step of the planner leads there.
  bound_layout const rows = bind(mesh, layout{shard("tp"), replicated});
  bound_layout both = rows;
  both.partial_axes = axis_set::of(0);
  REQUIRE(plan_redistribution(mesh, rows, both).size() == 0);
  REQUIRE_THROWS_MATCHES(
      cache.get(rows, both), invalid_layout_error,
      Catch::Matchers::MessageMatches(ContainsSubstring("no plan takes S(tp),R to S(tp),R P(sum:tp)") &&
                                      ContainsSubstring("mesh tp=2")));
  REQUIRE(cache.size() == 0);  // nothing cached for it
}

TEST_CASE("a bounded cache drops the least recently used entry", "[algebra][plan_cache]") {
  detail::lru_cache<int, int> cache(2);
  int made = 0;
  auto const get = [&](int k) {
    return *cache.get(k, [&] {
      ++made;
      return k * 10;
    });
  };
  REQUIRE(get(1) == 10);
  REQUIRE(get(2) == 20);
  REQUIRE(get(1) == 10);  // 1 is now the most recent
  REQUIRE(made == 2);
  REQUIRE(get(3) == 30);  // drops 2
  REQUIRE(cache.size() == 2);
  REQUIRE(get(1) == 10);
  REQUIRE(made == 3);
  REQUIRE(get(2) == 20);  // made again
  REQUIRE(made == 4);
  auto const kept = cache.get(3, [] { return -1; });  // 3 was dropped by 2: made anew
  REQUIRE(*kept == -1);
}

TEST_CASE("a plan cache shared by threads makes one plan per transition", "[algebra][plan_cache]") {
  mesh_shape const mesh{{"a", 2}, {"b", 3}};
  plan_cache cache(mesh);
  std::vector<layout> const layouts{layout{shard("a"), replicated}, layout{replicated, shard("b")},
                                    layout{shard("a", "b"), replicated}, layout{shard("b"), shard("a")}};
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int round = 0; round < 50; ++round)
        for (auto const& from : layouts)
          for (auto const& to : layouts) {
            auto const p = cache.get(bind(mesh, from), bind(mesh, to));
            if (p != cache.get(bind(mesh, from), bind(mesh, to))) ++mismatches;
          }
    });
  for (auto& t : threads) t.join();
  REQUIRE(mismatches == 0);
  REQUIRE(cache.size() == layouts.size() * layouts.size());
}
