// Axis sets and group geometry: the properties every collective's group and
// every submesh rely on, exhaustively on small meshes.
#include "layout_enumeration.hpp"

#include <shardmesh/algebra/axis_groups.hpp>
#include <shardmesh/algebra/axis_set.hpp>
#include <shardmesh/algebra/shard_geometry.hpp>

#include <catch2/catch_test_macros.hpp>

#include <set>
#include <vector>

using namespace shardmesh;

static_assert(axis_set::all(3) == axis_set{0b111});
static_assert((axis_set::of(0) | axis_set::of(2)).size() == 2);
static_assert((axis_set::all(3) - axis_set::of(1)) == axis_set{0b101});
static_assert(axis_set{0b100}.first() == 2);
static_assert(axis_set{}.empty() && !axis_set::of(0).empty());

namespace {

// Every subset of a mesh's axes.
std::vector<axis_set> subsets(mesh_shape const& mesh) {
  std::vector<axis_set> out;
  for (unsigned bits = 0; bits < (1U << mesh.ndim); ++bits) out.push_back({bits});
  return out;
}

}  // namespace

TEST_CASE("axis sets behave as sets", "[algebra][axis_set]") {
  for (unsigned a = 0; a < 16; ++a)
    for (unsigned b = 0; b < 16; ++b) {
      axis_set const x{a}, y{b};
      for (std::size_t i = 0; i < 4; ++i) {
        REQUIRE((x | y).contains(i) == (x.contains(i) || y.contains(i)));
        REQUIRE((x & y).contains(i) == (x.contains(i) && y.contains(i)));
        REQUIRE((x - y).contains(i) == (x.contains(i) && !y.contains(i)));
      }
      axis_set z = x;
      z.insert(3).erase(0);
      REQUIRE(z.contains(3));
      REQUIRE(!z.contains(0));
      REQUIRE(z.size() == (x | axis_set::of(3)).size() - (x.contains(0) ? 1 : 0));
    }
}

TEST_CASE("groups partition the mesh and number their members", "[algebra][axis_groups]") {
  for (auto const& mesh : test::small_meshes(3, 3))
    for (axis_set const axes : subsets(mesh)) {
      std::size_t const n = group_size(mesh, axes);
      std::size_t const groups = mesh.size() / n;
      REQUIRE(n * groups == mesh.size());
      mesh_shape const shape = group_shape(mesh, axes);
      REQUIRE(shape.ndim == axes.size());
      REQUIRE(shape.size() == n);
      std::vector<std::set<std::size_t>> members(groups);
      for (std::size_t r = 0; r < mesh.size(); ++r) {
        std::size_t const p = group_position(mesh, axes, r);
        std::size_t const g = group_index(mesh, axes, r);
        REQUIRE(p < n);
        REQUIRE(g < groups);
        REQUIRE(group_member(mesh, axes, r, p) == r);
        members[g].insert(r);
        // Members differ from r only on the group's axes, and share its group.
        mesh_coordinates const c = coordinates_of(mesh, r);
        for (std::size_t i = 0; i < n; ++i) {
          std::size_t const q = group_member(mesh, axes, r, i);
          REQUIRE(group_position(mesh, axes, q) == i);
          REQUIRE(group_index(mesh, axes, q) == g);
          mesh_coordinates const cq = coordinates_of(mesh, q);
          for (std::size_t a = 0; a < mesh.ndim; ++a)
            if (!axes.contains(a)) REQUIRE(cq[a] == c[a]);
        }
        // The position is the rank within the group's own mesh.
        mesh_coordinates inner{};
        for (std::size_t a = 0, k = 0; a < mesh.ndim; ++a)
          if (axes.contains(a)) inner[k++] = c[a];
        REQUIRE(rank_of(shape, inner) == p);
      }
      for (auto const& group : members) REQUIRE(group.size() == n);
    }
}

TEST_CASE("a permutation of two axes is an involution that swaps their coordinates", "[algebra][axis_groups]") {
  for (auto const& mesh : test::small_meshes(3, 3))
    for (std::size_t x = 0; x < mesh.ndim; ++x)
      for (std::size_t y = x + 1; y < mesh.ndim; ++y) {
        if (mesh.extent(x) != mesh.extent(y)) continue;
        axis_set const pair = axis_set::of(x) | axis_set::of(y);
        for (std::size_t r = 0; r < mesh.size(); ++r) {
          std::size_t const q = permutation_source(mesh, pair, r);
          REQUIRE(permutation_source(mesh, pair, q) == r);
          REQUIRE(coordinates_of(mesh, q)[x] == coordinates_of(mesh, r)[y]);
          REQUIRE(group_index(mesh, pair, q) == group_index(mesh, pair, r));
        }
      }
}

TEST_CASE("the ranks holding an index are the owner's coordinates on the dimension's axes", "[algebra][axis_groups]") {
  for (auto const& mesh : test::small_meshes(2, 3))
    for (auto const& l : test::all_layouts(mesh, 1, {.partial = {}, .cyclic = {1, 2}})) {
      bound_layout const b = bind(mesh, l);
      for (std::size_t extent : {1UL, 5UL, 7UL})
        for (std::size_t g = 0; g < extent; ++g) {
          dim_location const at = locate(mesh, b.dims[0], extent, g);
          tensor_index const index{g};
          location const owned = owner(mesh, b, {extent}, index);
          for (std::size_t r = 0; r < mesh.size(); ++r) {
            mesh_coordinates const c = coordinates_of(mesh, r);
            bool const holds = holds_index(b.dims[0], at, c);
            // A holder sees g among its local indices exactly when holds_index says so.
            bool seen = false;
            for (std::size_t i = 0; i < local_extent(mesh, b.dims[0], extent, c); ++i)
              seen = seen || to_global(mesh, b.dims[0], extent, c, i) == g;
            REQUIRE(holds == seen);
            if (holds) REQUIRE(moved_to_index(b.dims[0], at, c) == c);
          }
          REQUIRE(holds_index(b.dims[0], at, coordinates_of(mesh, owned.rank)));
        }
    }
}
