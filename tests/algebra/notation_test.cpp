// Notation in: parse_layout and parse_mesh invert to_string exactly (every
// layout the tests enumerate, every small mesh), at compile time too, and
// malformed text is refused with the text quoted and the column named.
#include "layout_enumeration.hpp"

#include <shardmesh/algebra/notation.hpp>
#include <shardmesh/algebra/shard_geometry.hpp>

#include <catch2/catch_test_macros.hpp>

#include <string>

using namespace shardmesh;

namespace {

constexpr auto grads = parse_layout("R,S(tp) P(sum:dp)");
static_assert(grads.ok());
static_assert(grads.value().rank == 2 && grads.value()[1].axes.contains("tp") &&
              grads.value().partial_axes.contains("dp"));
static_assert(to_string(parse_layout("S(dp,tp),C64(tp) P(max:x)").value()) == "S(dp,tp),C64(tp) P(max:x)");
static_assert(to_string(parse_mesh("dp=2,tp=4").value()) == "dp=2,tp=4");
static_assert(parse_mesh("dp=2,tp").value().extent(1) == dynamic_extent);

std::string error_of(std::string_view text) { return std::string(parse_layout(text).error.view()); }
std::string mesh_error_of(std::string_view text) { return std::string(parse_mesh(text).error.view()); }

}  // namespace

TEST_CASE("parse_layout inverts to_string for every enumerated layout", "[algebra][notation]") {
  std::size_t checked = 0;
  test::enumeration_options const options{{reduce_op::sum, reduce_op::max, reduce_op::min, reduce_op::prod}, {1, 64}};
  for (mesh_shape const& mesh : test::small_meshes(3, 2))
    for (std::size_t rank = 1; rank <= 3; ++rank)
      for (layout const& l : test::all_layouts(mesh, rank, options)) {
        auto const text = to_string(l);
        INFO(text.view());
        auto const back = parse_layout(text.view());
        REQUIRE(back.ok());
        REQUIRE(to_string(back.value()) == text.view());
        REQUIRE(bind(mesh, back.value()) == bind(mesh, l));
        ++checked;
      }
  CHECK(checked > 1000);
  // A partial tensor of rank 0 prints without dimensions.
  CHECK(to_string(parse_layout("P(prod:a,b)").value()).view() == "P(prod:a,b)");
}

TEST_CASE("parse_mesh inverts to_string, unbound extents included", "[algebra][notation]") {
  for (mesh_shape const& mesh : test::small_meshes(3, 3)) {
    REQUIRE(parse_mesh(to_string(mesh).view()).value() == mesh);
    mesh_shape open = mesh;
    open.axes[0].extent = dynamic_extent;
    REQUIRE(parse_mesh(to_string(open).view()).value() == open);  // "a=?"
  }
  CHECK(parse_mesh("tp").value() == mesh_shape{{"tp", dynamic_extent}});
}

TEST_CASE("malformed notation is refused with the text and the column", "[algebra][notation]") {
  CHECK(error_of("S(dp,,tp)") == "S(dp,,tp): empty axis name at column 6");
  CHECK(error_of("S(dp") == "S(dp: expected ')' at column 5");
  CHECK(error_of("X") == "X: expected R, S( or C at column 1");
  CHECK(error_of("R,") == "R,: expected R, S( or C at column 3");
  CHECK(error_of("R;R") == "R;R: expected ',' or ' P(' at column 2");
  CHECK(error_of("R P(avg:tp)") == "R P(avg:tp): expected sum, max, min or prod at column 5");
  CHECK(error_of("C0(tp)") == "C0(tp): a cyclic block of 0 elements at column 2");
  CHECK(error_of("S(1x)") == "S(1x): an axis name must start with a letter or '_' at column 3");
  CHECK(error_of("S(tp,tp)") == "S(tp,tp): axis named twice at column 6");
  CHECK(error_of("R P(sum:tp) x") == "R P(sum:tp) x: unexpected text at column 12");
  CHECK(error_of("") == ": empty layout at column 1");
  CHECK(mesh_error_of("dp=2,,tp") == "dp=2,,tp: empty axis name at column 6");
  CHECK(mesh_error_of("dp=0") == "dp=0: an axis of extent 0 at column 4");
  CHECK(mesh_error_of("dp=2,dp=2") == "dp=2,dp=2: axis named twice at column 6");
  CHECK(mesh_error_of("dp=x") == "dp=x: expected a number at column 4");
}
