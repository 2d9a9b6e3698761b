// Op results reuse the memory of results nothing references any more, never
// that of a live one; what the mesh keeps idle stays bounded by the most it
// had in use at once, and can be released.
#include "ops_check.hpp"

#include <shardmesh/ops/elementwise.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace result_pool_test {

using namespace shardmesh;

namespace {

constexpr layout rows{shard("tp"), replicated};

std::vector<double> sum_of(std::vector<double> const& a, std::vector<double> const& b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

}  // namespace

TEST_CASE("an op result reuses the memory of a dropped result, never a live one", "[ops][result_pool]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  ops::release_cached_results(mesh);
  tensor_index const e = test::extents({9, 4});
  auto const ga = test::pseudo_random(36, 1);
  auto const gb = test::pseudo_random(36, 2);
  auto const a = test::make<2>(mesh, rows, e, ga);
  auto const b = test::make<2>(mesh, rows, e, gb);
  auto const want = sum_of(ga, gb);

  auto first = ops::add(a, b);
  double const* const memory = first.local().data();
  first = {};
  auto second = ops::add(a, b);
  CHECK(second.local().data() == memory);  // dropped: reused
  test::require_close(test::values_of(second), want, 0);

  auto third = ops::add(second, b);  // second is live: a new shard
  CHECK(third.local().data() != memory);
  test::require_close(test::values_of(second), want, 0);
  test::require_close(test::values_of(third), sum_of(want, gb), 0);

  // A copy of the shard's View holds it as a dtensor does.
  auto const view = second.local();
  second = {};
  auto const fourth = ops::add(a, b);
  CHECK(fourth.local().data() != view.data());
  test::require_close(test::values_of(fourth), want, 0);
}

TEST_CASE("idle op results stay within the peak in use and can be released", "[ops][result_pool]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  ops::release_cached_results(mesh);
  auto const make = [&](std::size_t n) {
    auto const g = test::pseudo_random(n * 4, n);
    return test::make<2>(mesh, rows, test::extents({n, 4}), g);
  };
  // Results of 16 distinct shapes, each dropped at once, beside one live one.
  auto const big = make(64);
  auto const live = ops::add(big, big);
  std::size_t largest = 0;
  for (std::size_t n = 1; n <= 16; ++n) {
    auto const x = make(n);
    auto const y = ops::add(x, x);
    largest = std::max(largest, y.local().span() * sizeof(double));
    ops::cached_results const now = ops::cached_result_bytes(mesh);
    CHECK(now.held >= now.idle + y.local().span() * sizeof(double));
  }
  ops::cached_results const after = ops::cached_result_bytes(mesh);
  std::size_t const live_bytes = live.local().span() * sizeof(double);
  INFO("held " << after.held << ", idle " << after.idle << ", live " << live_bytes);
  CHECK(after.held - after.idle == live_bytes);
  // Before each new allocation the idle results are trimmed to the most in
  // use at once (live and the largest result), and then one more is dropped.
  CHECK(after.idle <= live_bytes + 2 * largest);

  ops::release_cached_results(mesh);
  ops::cached_results const released = ops::cached_result_bytes(mesh);
  CHECK(released.idle == 0);
  CHECK(released.held == live_bytes);
}

TEST_CASE("the ledger counts op results as workspace, and those named as kept as activations", "[ops][result_pool]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  ops::release_cached_results(mesh);
  auto& pools = mesh.state<ops::detail::result_pools>();
  memory_ledger& ledger = mesh.ledger();
  using enum memory_category;
  auto const g = test::pseudo_random(36, 1);
  auto const a = test::make<2>(mesh, rows, test::extents({9, 4}), g);
  std::size_t const activations_before = ledger.current(activations), workspace_before = ledger.current(workspace);
  auto const kept = ops::add(a, a);
  auto const other = ops::add(kept, a);  // transient
  std::size_t const bytes = kept.local().span() * sizeof(double);
  CHECK(ledger.current(activations) == activations_before);
  CHECK(ledger.current(workspace) == workspace_before + 2 * bytes);

  std::size_t const total = ledger.current_total();
  ledger.reset_peaks();
  pools.classify({kept.local().data()});
  CHECK(ledger.current(activations) == activations_before + bytes);
  CHECK(ledger.current(workspace) == workspace_before + bytes);
  CHECK(ledger.current_total() == total);
  CHECK(ledger.peak_total() == total);  // moved, never counted twice

  pools.classify({});  // kept no more
  CHECK(ledger.current(activations) == activations_before);
  CHECK(ledger.current(workspace) == workspace_before + 2 * bytes);
  CHECK(ledger.peak(activations) == activations_before + bytes);
}

}  // namespace result_pool_test
