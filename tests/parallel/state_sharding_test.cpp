// ZeRO stages as layouts: the postconditions of state_layouts_for over
// meshes, parameter layouts and stages, and the geometry that makes them
// state sharding: the dp blocks of a rank's compute block tile it, so each
// stage's bytes per rank are the table's (uneven extents included).
#include <shardmesh/algebra/plan_traffic.hpp>
#include <shardmesh/algebra/shard_geometry.hpp>
#include <shardmesh/plan/data_parallel_collectives.hpp>
#include <shardmesh/strategy/state_sharding.hpp>

#include <catch2/catch_test_macros.hpp>

#include <initializer_list>
#include <string>
#include <vector>

using namespace shardmesh;
using parallel::zero_stage;

namespace {

constexpr zero_stage stages[] = {zero_stage::none, zero_stage::optimizer_state, zero_stage::gradients,
                                 zero_stage::parameters};

bound_layout with_dp(bound_layout l, std::size_t dp) {
  l.dims[0].axes[l.dims[0].count++] = static_cast<unsigned char>(dp);
  return l;
}

// The collectives each stage adds over dp, as the seeds' table has them:
// ZeRO-0 all-reduces the gradients; ZeRO-1 also gathers the updated values;
// ZeRO-2 reduce-scatters instead; ZeRO-3 gathers the parameters ahead of
// each forward and backward and gathers nothing after the update.
constexpr bool runs(zero_stage stage, std::initializer_list<parallel::dp_collective> want) {
  parallel::dp_collectives const got = parallel::data_parallel_collectives(stage);
  if (got.count != want.size()) return false;
  std::size_t i = 0;
  for (parallel::dp_collective const& w : want) {
    parallel::dp_collective const& g = got.list[i++];
    if (g.kind != w.kind || g.what != w.what || g.when != w.when) return false;
  }
  return true;
}
using parallel::collective_kind;
using parallel::dp_moment;
using parallel::dp_payload;
static_assert(runs(zero_stage::none,
                   {{collective_kind::all_reduce, dp_payload::gradients, dp_moment::after_backward}}));
static_assert(runs(zero_stage::optimizer_state,
                   {{collective_kind::all_reduce, dp_payload::gradients, dp_moment::after_backward},
                    {collective_kind::all_gather, dp_payload::updated_parameters, dp_moment::after_backward}}));
static_assert(runs(zero_stage::gradients,
                   {{collective_kind::reduce_scatter, dp_payload::gradients, dp_moment::after_backward},
                    {collective_kind::all_gather, dp_payload::updated_parameters, dp_moment::after_backward}}));
static_assert(runs(zero_stage::parameters,
                   {{collective_kind::all_gather, dp_payload::parameters, dp_moment::before_forward},
                    {collective_kind::all_gather, dp_payload::parameters, dp_moment::before_backward},
                    {collective_kind::reduce_scatter, dp_payload::gradients, dp_moment::after_backward}}));

}  // namespace

TEST_CASE("each stage keeps each state where the table says", "[parallel][zero]") {
  constexpr mesh_shape mesh{{"dp", 2}, {"tp", 2}};
  constexpr bound_layout column = bind(mesh, layout{replicated, shard("tp")});
  constexpr std::size_t dp = 0;
  constexpr auto s0 = parallel::state_layouts_for(column, zero_stage::none, dp);
  constexpr auto s3 = parallel::state_layouts_for(column, zero_stage::parameters, dp);
  STATIC_REQUIRE(s0.stored == column);
  STATIC_REQUIRE(s0.state == column);
  STATIC_REQUIRE(s3.stored == bind(mesh, layout{shard("dp"), shard("tp")}));
  STATIC_REQUIRE(s3.accumulate == bind(mesh, layout{replicated, shard("tp")}.partial(reduce_op::sum, "dp")));
  constexpr bound_layout rows = bind(mesh, layout{shard("tp"), replicated});
  STATIC_REQUIRE(parallel::state_layouts_for(rows, zero_stage::gradients, dp).reduced ==
                 bind(mesh, layout{shard("tp", "dp"), replicated}));
  STATIC_REQUIRE(parallel::state_layouts_for(rows, zero_stage::parameters, npos).stored == rows);
}

TEST_CASE("state layouts: postconditions and exact bytes per rank, uneven extents included", "[parallel][zero]") {
  std::vector<layout> const parameters{layout{replicated}, layout{shard("tp")}, layout{replicated, shard("tp")},
                                       layout{shard("tp"), replicated}, layout{replicated, shard("tp"), replicated}};
  for (std::size_t dps : {1, 2, 3, 4})
    for (std::size_t tps : {1, 2, 3}) {
      mesh_shape const mesh{{"dp", dps}, {"tp", tps}};
      std::size_t const dp = mesh.find("dp");
      for (layout const& p : parameters)
        for (std::size_t extent : {1, 5, 7, 12})
          for (zero_stage stage : stages) {
            INFO("dp=" << dps << " tp=" << tps << ", layout rank " << p.rank << ", extent " << extent << ", stage "
                       << static_cast<int>(stage));
            bound_layout const compute = bind(mesh, p);
            REQUIRE(parallel::state_sharding_error(mesh, compute, dp).empty());
            auto const s = parallel::state_layouts_for(compute, stage, dp);
            bound_layout const sharded = with_dp(compute, dp);
            auto const n = static_cast<unsigned>(stage);
            REQUIRE(s.compute == compute);
            REQUIRE(s.state == (n >= 1 ? sharded : compute));
            REQUIRE(s.reduced == (n >= 2 ? sharded : compute));
            REQUIRE(s.stored == (n >= 3 ? sharded : compute));
            bound_layout whole = s.accumulate;
            whole.partial_axes.erase(dp);
            REQUIRE(whole == compute);
            REQUIRE(s.accumulate.partial_axes.contains(dp));
            tensor_index global{};
            for (std::size_t d = 0; d < p.rank; ++d) global[d] = extent + d;
            // The dp group's blocks of each rank's compute block tile it, in order.
            for (std::size_t r = 0; r < mesh.size(); ++r) {
              mesh_coordinates c = coordinates_of(mesh, r);
              interval const whole_rows = block_interval(mesh, compute.dims[0], global[0], c);
              std::size_t at = whole_rows.begin, total = 0;
              for (std::size_t q = 0; q < dps; ++q) {
                c[dp] = q;
                interval const part = block_interval(mesh, sharded.dims[0], global[0], c);
                REQUIRE(part.begin == at);
                at = part.end;
                total += local_size(mesh, sharded, global, rank_of(mesh, c));
              }
              REQUIRE(at == whole_rows.end);
              REQUIRE(total == local_size(mesh, compute, global, r));
            }
          }
    }
}

TEST_CASE("a parameter that cannot be state-sharded is refused with the reason", "[parallel][zero]") {
  constexpr mesh_shape mesh{{"dp", 2}, {"tp", 2}};
  CHECK(parallel::state_sharding_error(mesh, bind(mesh, layout{replicated, shard("dp")}), 0).view() ==
        "state sharding: the parameter is already sharded on \"dp\" in dimension 1");
  CHECK(parallel::state_sharding_error(mesh, bind(mesh, layout{cyclic(2, "tp"), replicated}), 0).view() ==
        "state sharding: dimension 0 of the parameter must be in blocks");
  CHECK(parallel::state_sharding_error(mesh, bind(mesh, layout{replicated}.partial(reduce_op::sum, "dp")), 0).view() ==
        "state sharding: the parameter is partial on the dp axis");
  CHECK(parallel::to_zero_stage(2) == zero_stage::gradients);
  CHECK_THROWS_AS(parallel::to_zero_stage(4), invalid_option_error);
}
