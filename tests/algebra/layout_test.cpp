#include <shardmesh/algebra/layout.hpp>
#include <shardmesh/algebra/validation.hpp>

#include <catch2/catch_test_macros.hpp>

#include <complex>

using namespace shardmesh;

namespace {
constexpr mesh_shape mesh{{"dp", 2}, {"tp", 2}};
}

TEST_CASE("layouts print in compact notation", "[algebra][layout]") {
  STATIC_REQUIRE(to_string(layout{shard("dp"), replicated}) == "S(dp),R");
  STATIC_REQUIRE(to_string(layout{shard("dp", "tp"), replicated}) == "S(dp,tp),R");
  STATIC_REQUIRE(to_string(layout{replicated, cyclic(64, "tp")}) == "R,C64(tp)");
  STATIC_REQUIRE(to_string(layout{replicated, shard("dp")}.partial(reduce_op::sum, "tp")) == "R,S(dp) P(sum:tp)");
  STATIC_REQUIRE(to_string(layout{}.partial(reduce_op::max, "dp", "tp")) == "P(max:dp,tp)");
}

TEST_CASE("layouts are structural values", "[algebra][layout]") {
  constexpr layout rows{shard("dp"), replicated};
  STATIC_REQUIRE(check_layout<mesh, rows>());
  STATIC_REQUIRE(rows == layout{shard("dp"), replicated});
  STATIC_REQUIRE_FALSE(rows == layout{replicated, shard("dp")});
}

TEST_CASE("valid layouts have no error", "[algebra][layout][validation]") {
  STATIC_REQUIRE(layout_error("layout", mesh, layout{shard("dp"), shard("tp")}).empty());
  STATIC_REQUIRE(layout_error("layout", mesh, layout{shard("tp", "dp"), replicated}).empty());
  STATIC_REQUIRE(layout_error("layout", mesh, layout{replicated, replicated}.partial(reduce_op::sum, "dp")).empty());
  STATIC_REQUIRE(layout_error("layout", mesh, layout{cyclic(3, "dp"), replicated}).empty());
}

TEST_CASE("invalid meshes and layouts get one sentence naming dimension and axis", "[algebra][layout][validation]") {
  STATIC_REQUIRE(
      layout_error("layout", mesh, layout{shard("sp"), replicated}) ==
      "layout: dimension 0 is sharded on axis \"sp\", which the mesh lacks (layout S(sp),R, mesh dp=2,tp=2)");
  STATIC_REQUIRE(layout_error("redistribute", mesh, layout{shard("dp"), shard("tp", "tp")}) ==
                 "redistribute: dimension 1 is sharded twice on axis \"tp\" (layout S(dp),S(tp,tp), mesh dp=2,tp=2)");
  STATIC_REQUIRE(layout_error("layout", mesh, layout{shard("tp"), shard("tp")}) ==
                 "layout: axis \"tp\" is used by dimension 0 and dimension 1 (layout S(tp),S(tp), mesh dp=2,tp=2)");
  STATIC_REQUIRE(layout_error("layout", mesh, layout{shard("tp"), replicated}.partial(reduce_op::sum, "tp")) ==
                 "layout: axis \"tp\" is used by dimension 0 and the partial set (layout S(tp),R P(sum:tp), mesh "
                 "dp=2,tp=2)");
  STATIC_REQUIRE(layout_error("layout", mesh, layout{replicated}.partial(reduce_op::sum, "xp")) ==
                 "layout: the layout is partial on axis \"xp\", which the mesh lacks (layout R P(sum:xp), mesh "
                 "dp=2,tp=2)");
  STATIC_REQUIRE(layout_error("layout", mesh, layout{cyclic(0, "dp")}) ==
                 "layout: dimension 0 is cyclic with blocks of 0 elements (layout C0(dp), mesh dp=2,tp=2)");
  STATIC_REQUIRE(mesh_error("mesh", mesh_shape{{"dp", 2}, {"dp", 2}}) == "mesh: the mesh has two axes called \"dp\"");
  STATIC_REQUIRE(mesh_error("mesh", mesh_shape{{"d p", 2}}) ==
                 "mesh: mesh axis 0 is called \"d p\", which is not an identifier (letters, digits, '_')");
  STATIC_REQUIRE(mesh_error("mesh", mesh_shape{{"dp", 0}}) == "mesh: mesh axis \"dp\" has extent 0");
}

TEST_CASE("a reduction must fit the element type", "[algebra][layout][validation]") {
  constexpr layout max_on_tp = layout{replicated}.partial(reduce_op::max, "tp");
  constexpr layout sum_on_tp = layout{replicated}.partial(reduce_op::sum, "tp");
  STATIC_REQUIRE(layout_error<float>("layout", mesh, max_on_tp).empty());
  STATIC_REQUIRE(layout_error<int>("layout", mesh, max_on_tp).empty());
  STATIC_REQUIRE(layout_error<std::complex<double>>("layout", mesh, sum_on_tp).empty());
  STATIC_REQUIRE(layout_error<std::complex<float>>("layout", mesh, max_on_tp) ==
                 "layout: reduction max on axis \"tp\" does not fit element type c64 (layout R P(max:tp), mesh "
                 "dp=2,tp=2)");
  STATIC_REQUIRE_FALSE(layout_error<bool>("layout", mesh, sum_on_tp).empty());
  STATIC_REQUIRE_FALSE(layout_error<bool>("layout", mesh, max_on_tp).empty());  // MPI has no max on bool
}

TEST_CASE("impossible transitions are named", "[algebra][layout][validation]") {
  constexpr layout sharded{shard("tp"), replicated};
  constexpr layout partial_sum = layout{replicated, replicated}.partial(reduce_op::sum, "tp");
  constexpr layout partial_max = layout{replicated, replicated}.partial(reduce_op::max, "tp");
  STATIC_REQUIRE(transition_error("redistribute", mesh, partial_sum, sharded).empty());
  STATIC_REQUIRE(transition_error("redistribute", mesh, layout{replicated, replicated}, partial_sum).empty());
  STATIC_REQUIRE(transition_error("redistribute", mesh, sharded, partial_sum) ==
                 "redistribute: dimension 0 is sharded on axis \"tp\", which the target makes partial: shard to "
                 "partial is impossible (S(tp),R -> R,R P(sum:tp), mesh dp=2,tp=2)");
  STATIC_REQUIRE(transition_error("redistribute", mesh, partial_sum, partial_max) ==
                 "redistribute: axis \"tp\" is partial sum and cannot become partial max (R,R P(sum:tp) -> R,R "
                 "P(max:tp), mesh dp=2,tp=2)");
  STATIC_REQUIRE(transition_error("redistribute", mesh, layout{shard("dp")}, sharded) ==
                 "redistribute: layout S(dp) has 1 dimensions, layout S(tp),R has 2");
}
