// Pinned plans: each transition's plan is computed at compile time and its
// steps are checked with static_assert.
#include <shardmesh/algebra/planner.hpp>

#include <catch2/catch_test_macros.hpp>

using namespace shardmesh;

namespace {

constexpr mesh_shape line{{"tp", 4}};
constexpr mesh_shape grid{{"dp", 2}, {"tp", 2}};

constexpr layout R2{replicated, replicated};

// The plan has exactly these steps, in order.
template <std::size_t N>
constexpr bool steps_are(redistribution_plan const& p, step_kind const (&kinds)[N]) {
  if (p.size() != N) return false;
  for (std::size_t i = 0; i < N; ++i)
    if (p[i].kind != kinds[i]) return false;
  return true;
}

// Bytes a rank receives over the plan, as a fraction of the global tensor.
constexpr bool bytes_are(mesh_shape const& mesh, redistribution_plan const& p, std::uint64_t num, std::uint64_t den) {
  return p.bytes * den == num * global_units(mesh);
}

}  // namespace

TEST_CASE("an all-gather turns a sharded dimension replicated", "[algebra][planner]") {
  constexpr auto p = static_plan<line, layout{shard("tp"), replicated}, R2>();
  STATIC_REQUIRE(steps_are(p, {step_kind::all_gather}));
  STATIC_REQUIRE(bytes_are(line, p, 3, 4));
  STATIC_REQUIRE(to_string(line, p[0]) == "all_gather(tp, dim 0)");
}

TEST_CASE("a reduce-scatter turns partial into sharded", "[algebra][planner]") {
  constexpr auto p = static_plan<grid, R2.partial(reduce_op::sum, "tp"), layout{shard("tp"), replicated}>();
  STATIC_REQUIRE(steps_are(p, {step_kind::reduce_scatter}));
  STATIC_REQUIRE(bytes_are(grid, p, 1, 2));
  STATIC_REQUIRE(to_string(grid, p[0]) == "reduce_scatter(sum, tp, dim 0)");
}

TEST_CASE("an all-to-all moves sharding from one dimension to another", "[algebra][planner]") {
  constexpr auto p = static_plan<line, layout{shard("tp"), replicated}, layout{replicated, shard("tp")}>();
  STATIC_REQUIRE(steps_are(p, {step_kind::all_to_all}));
  STATIC_REQUIRE(bytes_are(line, p, 3, 16));
  REQUIRE(to_string(line, p, "f32[4096,4096] ") ==
          "f32[4096,4096] S(tp),R -> R,S(tp): all_to_all(tp, dim 0->1), 3/4 of local\n");
}

TEST_CASE("replicated to sharded is a local slice that moves nothing", "[algebra][planner]") {
  constexpr auto p = static_plan<grid, R2, layout{shard("tp"), replicated}>();
  STATIC_REQUIRE(steps_are(p, {step_kind::slice}));
  STATIC_REQUIRE(p.bytes == 0);
  STATIC_REQUIRE(p.communicating_steps() == 0);
}

TEST_CASE("a pure relabelling is a permutation", "[algebra][planner]") {
  constexpr auto p = static_plan<grid, layout{shard("dp"), replicated}, layout{shard("tp"), replicated}>();
  STATIC_REQUIRE(steps_are(p, {step_kind::permute}));
  STATIC_REQUIRE(to_string(grid, p[0]) == "permute(dp<->tp)");
  constexpr auto swap = static_plan<grid, layout{shard("dp"), shard("tp")}, layout{shard("tp"), shard("dp")}>();
  STATIC_REQUIRE(steps_are(swap, {step_kind::permute}));
}

TEST_CASE("two axes sharding two dimensions gather in one step", "[algebra][planner]") {
  constexpr auto p = static_plan<grid, layout{shard("dp"), shard("tp")}, R2>();
  STATIC_REQUIRE(steps_are(p, {step_kind::all_gather}));
  STATIC_REQUIRE(bytes_are(grid, p, 3, 4));
  STATIC_REQUIRE(to_string(grid, p[0]) == "all_gather(dp,tp, dim 0,1)");
}

TEST_CASE("two axes sharding one dimension gather minor first", "[algebra][planner]") {
  constexpr auto all = static_plan<grid, layout{shard("dp", "tp"), replicated}, R2>();
  STATIC_REQUIRE(steps_are(all, {step_kind::all_gather}));
  constexpr auto minor = static_plan<grid, layout{shard("dp", "tp"), replicated}, layout{shard("dp"), replicated}>();
  STATIC_REQUIRE(steps_are(minor, {step_kind::all_gather}));
  STATIC_REQUIRE(to_string(grid, minor[0]) == "all_gather(tp, dim 0)");
}

TEST_CASE("partial becomes replicated by an all-reduce, and replicated partial locally", "[algebra][planner]") {
  constexpr auto reduce = static_plan<grid, R2.partial(reduce_op::max, "tp"), R2>();
  STATIC_REQUIRE(steps_are(reduce, {step_kind::all_reduce}));
  STATIC_REQUIRE(bytes_are(grid, reduce, 1, 1));
  constexpr auto make_partial = static_plan<grid, R2, R2.partial(reduce_op::sum, "tp")>();
  STATIC_REQUIRE(steps_are(make_partial, {step_kind::to_partial}));
  STATIC_REQUIRE(make_partial.bytes == 0);
}

TEST_CASE("partial on two axes reduce-scatters onto two dimensions", "[algebra][planner]") {
  constexpr auto p = static_plan<grid, R2.partial(reduce_op::sum, "dp", "tp"), layout{shard("dp"), shard("tp")}>();
  STATIC_REQUIRE(steps_are(p, {step_kind::reduce_scatter, step_kind::reduce_scatter}));
  STATIC_REQUIRE(bytes_are(grid, p, 3, 4));
}

TEST_CASE("a sharded and partial tensor reduces before it gathers", "[algebra][planner]") {
  constexpr auto p = static_plan<grid, layout{shard("dp"), replicated}.partial(reduce_op::sum, "tp"), R2>();
  STATIC_REQUIRE(p.communicating_steps() == 2);
  STATIC_REQUIRE(p[1].kind == step_kind::all_gather);
  STATIC_REQUIRE(bytes_are(grid, p, 1, 1));
}

TEST_CASE("block-cyclic layouts move by all-to-all-v or gather whole", "[algebra][planner]") {
  constexpr auto gather = static_plan<grid, layout{cyclic(2, "tp"), replicated}, R2>();
  STATIC_REQUIRE(steps_are(gather, {step_kind::all_gather}));
  constexpr auto deal = static_plan<grid, layout{shard("tp"), replicated}, layout{cyclic(2, "tp"), replicated}>();
  STATIC_REQUIRE(steps_are(deal, {step_kind::all_to_all_v}));
  constexpr auto local = static_plan<grid, R2, layout{cyclic(2, "dp", "tp"), replicated}>();
  STATIC_REQUIRE(steps_are(local, {step_kind::slice}));
}

TEST_CASE("the same layout needs no step", "[algebra][planner]") {
  constexpr auto p = static_plan<grid, layout{shard("dp"), shard("tp")}, layout{shard("dp"), shard("tp")}>();
  STATIC_REQUIRE(p.size() == 0);
}
