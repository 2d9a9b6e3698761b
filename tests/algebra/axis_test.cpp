#include <shardmesh/algebra/axis.hpp>

#include <catch2/catch_test_macros.hpp>

using namespace shardmesh;

TEST_CASE("axis names are identifiers", "[algebra][axis]") {
  STATIC_REQUIRE(is_identifier("dp"));
  STATIC_REQUIRE(is_identifier("_tp2"));
  STATIC_REQUIRE_FALSE(is_identifier(""));
  STATIC_REQUIRE_FALSE(is_identifier("2d"));
  STATIC_REQUIRE_FALSE(is_identifier("d p"));
  STATIC_REQUIRE_FALSE(is_identifier("tp,dp"));
}

TEST_CASE("an axis carries its name and extent", "[algebra][axis]") {
  using dp = axis<"dp", 4>;
  STATIC_REQUIRE(dp::name == "dp");
  STATIC_REQUIRE(dp::static_extent == 4);
  STATIC_REQUIRE(dp::is_static);
  STATIC_REQUIRE_FALSE(axis<"tp">::is_static);
  STATIC_REQUIRE(fixed_string("tp") == fixed_string("tp"));
  STATIC_REQUIRE_FALSE(fixed_string("tp") == fixed_string("dp"));
  STATIC_REQUIRE_FALSE(fixed_string("tp") == fixed_string("tp2"));
}
