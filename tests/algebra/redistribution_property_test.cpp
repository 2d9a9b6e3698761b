// Every plan, executed by the reference simulator, against the serial truth.
//
// Over small meshes and every pair of layouts (partial and cyclic included),
// for tensors whose extents divide the mesh evenly, unevenly, and are smaller
// than the mesh:
//  - the result equals the target layout's shards of the same global array
//    (reduced over partial axes where the target is partial);
//  - every rank receives exactly the elements plan_traffic predicts, and in
//    the even case exactly the plan's stated cost;
//  - without reductions, never more than one all-to-all-v of exactly the
//    elements each rank needs and does not hold;
//  - the plan is no costlier than an exhaustive search over the same steps.
#include "exhaustive.hpp"
#include "layout_enumeration.hpp"

#include <shardmesh/algebra/plan_traffic.hpp>
#include <shardmesh/algebra/planner.hpp>
#include <shardmesh/algebra/reference_simulator.hpp>
#include <shardmesh/algebra/validation.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

using namespace shardmesh;

namespace {

// The cheapest cost any path of steps reaches target with: Bellman-Ford
// relaxation over every reachable state until nothing improves.
std::uint64_t exhaustive_cost(mesh_shape const& mesh, bound_layout const& from, bound_layout const& to) {
  std::uint64_t const alpha = cost_model{}.alpha_per_1024 * global_units(mesh) / 1024;
  bound_layout const target = detail::normalized(mesh, to);
  std::vector<bound_layout> states{detail::normalized(mesh, from)};
  std::vector<std::uint64_t> best{0};
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < states.size(); ++i) {
      bound_layout const here = states[i];  // states grows below
      detail::for_each_step(mesh, here, target, [&](plan_step step) {
        bound_layout const after = detail::normalized(mesh, step.after);
        std::uint64_t const cost = best[i] + (communicates(step.kind) ? alpha : 0) + step_bytes(mesh, step);
        auto const j = static_cast<std::size_t>(std::find(states.begin(), states.end(), after) - states.begin());
        if (j == states.size()) {
          states.push_back(after);
          best.push_back(cost);
          changed = true;
        } else if (cost < best[j]) {
          best[j] = cost;
          changed = true;
        }
      });
    }
  }
  auto const t = std::find(states.begin(), states.end(), target);
  return t == states.end() ? ~std::uint64_t{0} : best[static_cast<std::size_t>(t - states.begin())];
}

struct totals {
  std::size_t pairs = 0;
  std::size_t rejected = 0;
  std::size_t simulations = 0;
  std::size_t brute_force = 0;
};

// Extents of each kind for a tensor of `rank` dimensions on mesh. Even is
// 2 x mesh size: it divides by every group of axes, in blocks of 2 for cyclic.
std::vector<tensor_index> extents_for(mesh_shape const& mesh, std::size_t rank) {
  std::size_t const n = mesh.size();
  tensor_index even{}, uneven{}, small{};
  for (std::size_t d = 0; d < rank; ++d) {
    even[d] = 2 * n;
    uneven[d] = n + 1 + d;
    small[d] = n > 1 ? n - 1 : 1;
  }
  std::vector<tensor_index> out{uneven, small};
  std::size_t elements = 1;
  for (std::size_t d = 0; d < rank; ++d) elements *= 2 * n;
  if (elements <= 4096) out.insert(out.begin(), even);
  return out;
}

void check_pair(mesh_shape const& mesh, layout const& from, layout const& to, bool brute_force, totals& count) {
  ++count.pairs;
  if (!transition_error("redistribute", mesh, from, to).empty()) {
    ++count.rejected;
    return;
  }
  bound_layout const source = bind(mesh, from);
  bound_layout const target = bind(mesh, to);
  redistribution_plan const plan = plan_redistribution(mesh, source, target);
  INFO("mesh " << to_string(mesh).view() << ": " << to_string(from).view() << " -> " << to_string(to).view() << "\n"
               << to_string(mesh, plan));
  REQUIRE(plan.size() <= max_plan_steps);
  // The steps chain from source to target.
  bound_layout at = detail::normalized(mesh, source);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    REQUIRE(plan[i].before == at);
    at = plan[i].after;
  }
  REQUIRE(at == detail::normalized(mesh, target));

  if (brute_force) {
    REQUIRE(plan.cost <= exhaustive_cost(mesh, source, target));
    ++count.brute_force;
  }

  bool const even_case_exact = [&] {
    for (std::size_t i = 0; i < plan.size(); ++i)
      if (plan[i].kind == step_kind::permute || plan[i].kind == step_kind::all_to_all_v) return false;
    return true;
  }();
  for (tensor_index const& global : extents_for(mesh, from.rank)) {
    std::size_t elements = 1;
    for (std::size_t d = 0; d < from.rank; ++d) elements *= global[d];
    std::vector<double> values(elements);
    std::iota(values.begin(), values.end(), 1.0);

    reference::simulated_tensor t = reference::cut(mesh, source, global, values);
    reference::simulated_traffic const traffic = reference::simulate(plan, t);
    reference::simulated_tensor const expected = reference::cut(mesh, target, global, values);
    REQUIRE(detail::normalized(mesh, t.layout) == detail::normalized(mesh, target));
    REQUIRE(reference::reduced(t).shards == reference::reduced(expected).shards);

    std::vector<std::size_t> const predicted = received(mesh, plan, global);
    REQUIRE(traffic.received == predicted);
    // No plan beats the lower bound of what the busiest rank must receive.
    REQUIRE(*std::max_element(predicted.begin(), predicted.end()) >=
            transition_lower_bound(mesh, detail::normalized(mesh, source), detail::normalized(mesh, target), global));
    REQUIRE(std::accumulate(traffic.sent.begin(), traffic.sent.end(), std::size_t{0}) ==
            std::accumulate(traffic.received.begin(), traffic.received.end(), std::size_t{0}));

    if (global[0] == 2 * mesh.size() && even_case_exact)
      for (std::size_t r = 0; r < mesh.size(); ++r)
        REQUIRE(traffic.received[r] * global_units(mesh) == plan.bytes * elements);

    if (source.partial_axes.empty()) {
      std::size_t needed = 0;
      for (std::size_t r = 0; r < mesh.size(); ++r)
        needed += local_size(mesh, target, global, r) - detail::overlap(mesh, target, r, source, r, global);
      REQUIRE(std::accumulate(traffic.received.begin(), traffic.received.end(), std::size_t{0}) <= needed);
    }
    ++count.simulations;
  }
}

}  // namespace

// The default suite checks every 4th of the cases, unoptimised (sanitizer) builds every 8th, to stay within their
// timeout; the full suite every one (exhaustive.hpp).
#ifdef NDEBUG
std::size_t const thinning = test::case_stride(4);
#else
std::size_t const thinning = test::case_stride(8);
#endif

TEST_CASE("every plan reproduces the target exactly, with the predicted bytes, optimally",
          "[algebra][planner][simulator]") {
  totals count;
  std::size_t index = 0;
  for (auto const& mesh : test::small_meshes(3, 3))
    for (std::size_t rank = 1; rank <= 3; ++rank) {
      auto const layouts = test::all_layouts(mesh, rank, {.partial = {reduce_op::sum, reduce_op::max}, .cyclic = {2}});
      // Every pair up to two mesh axes and for vectors on three; a fixed
      // stride of pairs for matrices and rank-3 tensors on three axes. The
      // exhaustive search runs on every 3rd pair (every 29th on three axes).
      std::size_t const stride = thinning * (mesh.ndim < 3 || rank == 1 ? 1 : rank == 2 ? 17 : 211);
      std::size_t const brute_force_stride = mesh.ndim < 3 ? 3 : 29;
      for (auto const& from : layouts)
        for (auto const& to : layouts) {
          if (index++ % stride != 0) continue;
          check_pair(mesh, from, to, index % brute_force_stride == 0, count);
        }
    }
  std::printf(
      "redistribution properties: %zu layout pairs (%zu rejected as impossible), %zu simulations, "
      "%zu checked against exhaustive search\n",
      count.pairs, count.rejected, count.simulations, count.brute_force);
  CHECK(count.simulations > 10000 / thinning);
}

TEST_CASE("min and prod reductions reproduce the target exactly", "[algebra][planner][simulator]") {
  totals count;
  for (mesh_shape const& mesh : {mesh_shape{{"a", 2}, {"b", 2}}, mesh_shape{{"a", 3}}})
    for (std::size_t rank = 1; rank <= 2; ++rank) {
      auto const layouts = test::all_layouts(mesh, rank, {.partial = {reduce_op::min, reduce_op::prod}, .cyclic = {}});
      for (auto const& from : layouts)
        for (auto const& to : layouts) check_pair(mesh, from, to, false, count);
    }
  std::printf("min and prod: %zu layout pairs (%zu rejected as impossible), %zu simulations\n", count.pairs,
              count.rejected, count.simulations);
  CHECK(count.simulations > 1000);
}
