#include <shardmesh/algebra/mesh_shape.hpp>

#include <catch2/catch_test_macros.hpp>

using namespace shardmesh;

namespace {
constexpr mesh_shape mesh{{"dp", 2}, {"tp", 3}, {"pp", 4}};
}

TEST_CASE("mesh shapes name their axes and extents", "[algebra][mesh]") {
  STATIC_REQUIRE(mesh.ndim == 3);
  STATIC_REQUIRE(mesh.size() == 24);
  STATIC_REQUIRE(mesh.find("tp") == 1);
  STATIC_REQUIRE(mesh.find("sp") == npos);
  STATIC_REQUIRE(mesh.is_static());
  STATIC_REQUIRE(to_string(mesh) == "dp=2,tp=3,pp=4");
  constexpr mesh_shape dynamic{{"dp"}, {"tp", 2}};
  STATIC_REQUIRE_FALSE(dynamic.is_static());
  STATIC_REQUIRE(to_string(dynamic) == "dp=?,tp=2");
  constexpr std::size_t extents[] = {4, 2};
  STATIC_REQUIRE(dynamic.with_extents(extents) == mesh_shape{{"dp", 4}, {"tp", 2}});
}

TEST_CASE("ranks map to coordinates row-major, last axis fastest", "[algebra][mesh]") {
  STATIC_REQUIRE(coordinates_of(mesh, 0) == mesh_coordinates{0, 0, 0});
  STATIC_REQUIRE(coordinates_of(mesh, 1) == mesh_coordinates{0, 0, 1});
  STATIC_REQUIRE(coordinates_of(mesh, 4) == mesh_coordinates{0, 1, 0});
  STATIC_REQUIRE(coordinates_of(mesh, 12) == mesh_coordinates{1, 0, 0});
  // Postcondition, every rank: the maps are inverse and coordinates in range.
  for (std::size_t r = 0; r < mesh.size(); ++r) {
    auto const c = coordinates_of(mesh, r);
    for (std::size_t a = 0; a < mesh.ndim; ++a) REQUIRE(c[a] < mesh.extent(a));
    REQUIRE(rank_of(mesh, c) == r);
  }
}
