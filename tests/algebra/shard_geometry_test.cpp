#include "layout_enumeration.hpp"

#include <shardmesh/algebra/axis_groups.hpp>
#include <shardmesh/algebra/owned_blocks.hpp>
#include <shardmesh/algebra/shard_geometry.hpp>

#include <catch2/catch_test_macros.hpp>

#include <vector>

using namespace shardmesh;

namespace {

constexpr interval held(mesh_shape const& mesh, layout const& l, std::size_t extent, std::size_t rank) {
  return block_interval(mesh, bind(mesh, l).dims[0], extent, coordinates_of(mesh, rank));
}

}  // namespace

TEST_CASE("block shards use ceil-division; trailing shards are short or empty", "[algebra][geometry]") {
  constexpr mesh_shape line{{"x", 4}};
  constexpr layout s{shard("x")};
  STATIC_REQUIRE(held(line, s, 8, 1) == interval{2, 4});
  STATIC_REQUIRE(held(line, s, 7, 3) == interval{6, 7});
  STATIC_REQUIRE(held(line, s, 5, 2) == interval{4, 5});
  STATIC_REQUIRE(held(line, s, 5, 3) == interval{5, 5});
  STATIC_REQUIRE(held(line, s, 2, 2) == interval{2, 2});
}

TEST_CASE("several axes split a dimension nested, major axis first", "[algebra][geometry]") {
  constexpr mesh_shape grid{{"x", 2}, {"y", 2}};
  constexpr layout xy{shard("x", "y")};
  constexpr layout yx{shard("y", "x")};
  // 5 = [0,3) + [3,5); then each half again.
  STATIC_REQUIRE(held(grid, xy, 5, 0) == interval{0, 2});
  STATIC_REQUIRE(held(grid, xy, 5, 1) == interval{2, 3});
  STATIC_REQUIRE(held(grid, xy, 5, 2) == interval{3, 4});
  STATIC_REQUIRE(held(grid, xy, 5, 3) == interval{4, 5});
  // Rank 1 has x=0, y=1: under S(y,x) it holds y's second half, x's first part.
  STATIC_REQUIRE(held(grid, yx, 8, 1) == interval{4, 6});
}

TEST_CASE("nested block shards equal the flattened formula when the extent divides", "[algebra][geometry]") {
  for (auto const& mesh : test::small_meshes(3, 3))
    for (auto const& l : test::all_layouts(mesh, 1, {})) {
      bound_dim const dim = bind(mesh, l).dims[0];
      std::size_t const n = shard_count(mesh, dim);
      for (std::size_t extent : {n, 2 * n, 3 * n})
        for (std::size_t r = 0; r < mesh.size(); ++r) {
          auto const c = coordinates_of(mesh, r);
          REQUIRE(block_interval(mesh, dim, extent, c) == block_part(extent, n, shard_index(mesh, dim, c)));
        }
    }
}

TEST_CASE("cyclic shards deal blocks round-robin", "[algebra][geometry]") {
  constexpr mesh_shape line{{"x", 2}};
  constexpr bound_dim dim = bind(line, layout{cyclic(2, "x")}).dims[0];
  // 7 elements in blocks of 2: rank 0 holds blocks 0, 2 = {0,1,4,5}; rank 1 blocks 1, 3 = {2,3,6}.
  STATIC_REQUIRE(local_extent(line, dim, 7, {0}) == 4);
  STATIC_REQUIRE(local_extent(line, dim, 7, {1}) == 3);
  STATIC_REQUIRE(to_global(line, dim, 7, {0}, 2) == 4);
  STATIC_REQUIRE(to_global(line, dim, 7, {1}, 2) == 6);
  STATIC_REQUIRE(locate(line, dim, 7, 6).local == 2);
}

// Properties over every small mesh and layout: the shards of the ranks with
// coordinate 0 on non-sharding axes tile the global index space exactly once,
// local extents agree with the index maps, and owner(global(i)) is the rank
// that holds i (non-sharding coordinates set to 0) at local index i.
TEST_CASE("shards tile the tensor exactly once and owner inverts the index map", "[algebra][geometry]") {
  std::size_t cases = 0;
  std::vector<std::vector<tensor_index>> const extents_by_rank{
      {{0}, {1}, {2}, {3}, {4}, {5}, {7}, {8}, {9}},
      {{0, 3}, {1, 1}, {3, 5}, {5, 2}, {8, 7}},
  };
  for (auto const& mesh : test::small_meshes(3, 3))
    for (std::size_t rank = 1; rank <= 2; ++rank)
      for (auto const& l : test::all_layouts(mesh, rank, {.partial = {}, .cyclic = {1, 2}})) {
        bound_layout const b = bind(mesh, l);
        axis_set const sharding = sharding_axes(b);
        for (tensor_index const& global : extents_by_rank[rank - 1]) {
          std::size_t const size = rank == 1 ? global[0] : global[0] * global[1];
          std::vector<int> count(size, 0);
          for (std::size_t r = 0; r < mesh.size(); ++r) {
            auto const c = coordinates_of(mesh, r);
            bool canonical = true;
            for (std::size_t a = 0; a < mesh.ndim; ++a)
              if (!sharding.contains(a) && c[a] != 0) canonical = false;
            tensor_index const local = local_extents(mesh, b, global, r);
            tensor_index i{};
            std::size_t const local_size = rank == 1 ? local[0] : local[0] * local[1];
            for (std::size_t k = 0; k < local_size; ++k) {
              i[0] = rank == 1 ? k : k / local[1];
              i[1] = rank == 1 ? 0 : k % local[1];
              tensor_index const g = local_to_global(mesh, b, global, r, i);
              for (std::size_t d = 0; d < rank; ++d) REQUIRE(g[d] < global[d]);
              location const at = owner(mesh, b, global, g);
              mesh_coordinates zeroed = c;
              for (std::size_t a = 0; a < mesh.ndim; ++a)
                if (!sharding.contains(a)) zeroed[a] = 0;
              REQUIRE(at.rank == rank_of(mesh, zeroed));
              REQUIRE(at.local == i);
              if (canonical) ++count[rank == 1 ? g[0] : g[0] * global[1] + g[1]];
            }
          }
          for (int n : count) REQUIRE(n == 1);
          ++cases;
        }
      }
  INFO("layouts x extents checked: " << cases);
  CHECK(cases > 1000);
}

// Runs: consecutive_from and held_from against the index maps, index by
// index, over every small mesh and 1-D layout (block and cyclic).
TEST_CASE("runs of consecutive local indices and of one holder's global indices", "[algebra][geometry]") {
  std::size_t runs = 0;
  for (auto const& mesh : test::small_meshes(3, 3))
    for (auto const& l : test::all_layouts(mesh, 1, {.partial = {}, .cyclic = {1, 2, 3}})) {
      bound_dim const dim = bind(mesh, l).dims[0];
      for (std::size_t extent : {1, 2, 5, 7, 9, 12}) {
        for (std::size_t r = 0; r < mesh.size(); ++r) {
          mesh_coordinates const c = coordinates_of(mesh, r);
          std::size_t const n = local_extent(mesh, dim, extent, c);
          for (std::size_t i = 0; i < n; ++i) {
            std::size_t const run = consecutive_from(mesh, dim, extent, c, i);
            REQUIRE(run >= 1);
            REQUIRE(i + run <= n);
            for (std::size_t k = 0; k < run; ++k)
              REQUIRE(to_global(mesh, dim, extent, c, i + k) == to_global(mesh, dim, extent, c, i) + k);
            if (dim.dist == distribution::block) REQUIRE(i + run == n);
            ++runs;
          }
        }
        for (std::size_t g = 0; g < extent; ++g) {
          std::size_t const run = held_from(mesh, dim, extent, g);
          REQUIRE(run >= 1);
          REQUIRE(g + run <= extent);
          dim_location const first = locate(mesh, dim, extent, g);
          for (std::size_t k = 0; k < run; ++k)
            REQUIRE(locate(mesh, dim, extent, g + k).coordinates == first.coordinates);
          // A block shard's run ends where the next holder's begins.
          if (dim.dist == distribution::block && g + run < extent)
            REQUIRE(locate(mesh, dim, extent, g + run).coordinates != first.coordinates);
          ++runs;
        }
      }
    }
  INFO("indices checked: " << runs);
  CHECK(runs > 1000);
}

// Owned blocks: they tile each rank's shard exactly once, each is a box of
// consecutive global indices at its stated offsets, and the canonical ranks'
// blocks tile the tensor; a block shard is one block, a cyclic dimension one
// per dealt block.
TEST_CASE("owned blocks tile each shard and map to their global offsets", "[algebra][geometry]") {
  std::size_t blocks_checked = 0;
  std::vector<tensor_index> const extents{{0, 3}, {1, 1}, {5, 7}, {8, 6}, {9, 2}};
  for (auto const& mesh : test::small_meshes(3, 3))
    for (auto const& l : test::all_layouts(mesh, 2, {.partial = {}, .cyclic = {1, 2, 3}})) {
      bound_layout const b = bind(mesh, l);
      axis_set const sharding = sharding_axes(b);
      for (tensor_index const& global : extents) {
        std::vector<int> tensor_count(global[0] * global[1], 0);
        for (std::size_t r = 0; r < mesh.size(); ++r) {
          tensor_index const local = local_extents(mesh, b, global, r);
          std::vector<int> shard_count(local[0] * local[1], 0);
          bool const canonical = group_position(mesh, axis_set::all(mesh.ndim) - sharding, r) == 0;
          std::vector<owned_block> const blocks = owned_blocks(mesh, b, global, r);
          bool const cyclic = b.dims[0].dist == distribution::cyclic || b.dims[1].dist == distribution::cyclic;
          if (!cyclic && local[0] * local[1] > 0) REQUIRE(blocks.size() == 1);
          for (owned_block const& block : blocks) {
            REQUIRE(block.extents[0] >= 1);
            REQUIRE(block.extents[1] >= 1);
            for (std::size_t i = 0; i < block.extents[0]; ++i)
              for (std::size_t j = 0; j < block.extents[1]; ++j) {
                tensor_index const at{block.local_offset[0] + i, block.local_offset[1] + j};
                REQUIRE(at[0] < local[0]);
                REQUIRE(at[1] < local[1]);
                tensor_index const g = local_to_global(mesh, b, global, r, at);
                REQUIRE(g[0] == block.global_offset[0] + i);
                REQUIRE(g[1] == block.global_offset[1] + j);
                ++shard_count[at[0] * local[1] + at[1]];
                if (canonical) ++tensor_count[g[0] * global[1] + g[1]];
              }
            ++blocks_checked;
          }
          for (int n : shard_count) REQUIRE(n == 1);
        }
        for (int n : tensor_count) REQUIRE(n == 1);
      }
    }
  INFO("blocks checked: " << blocks_checked);
  CHECK(blocks_checked > 1000);
}
