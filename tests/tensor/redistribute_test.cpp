// The runtime against the serial reference, for every pair of layouts of
// rank-2 tensors on 1-D and 2-D meshes of this run's ranks (and a sample on
// 2x2x2), with even, uneven and smaller-than-mesh extents.
#include "redistribution_check.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cstdio>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace redistribute_test {

using namespace shardmesh;

TEST_CASE("every layout pair of a matrix on 1-D and 2-D meshes matches the serial reference", "[tensor]") {
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  std::size_t checked = 0;
  for (mesh_shape const& shape : test::meshes_of(ranks)) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    auto const layouts = test::all_layouts(shape, 2, {.partial = {reduce_op::sum}, .cyclic = {2}});
    // Every pair on up to two axes; every 13th pair on three.
    std::size_t const stride = shape.ndim < 3 ? 1 : 13;
    std::size_t index = 0;
    for (auto const& from : layouts)
      for (auto const& to : layouts) {
        if (index++ % stride != 0 || !transition_error("", shape, from, to).empty()) continue;
        for (tensor_index const& global : test::extents_for<2>(ranks)) {
          test::check_redistribution<double, 2>(mesh, from, to, global);
          ++checked;
        }
      }
  }
  if (test::world_rank() == 0) std::printf("%zu redistributions checked on %zu ranks\n", checked, ranks);
  CHECK(checked > 0);
}

TEST_CASE("rows longer than one kernel segment, and vectors, redistribute exactly", "[tensor]") {
  // The pack kernel cuts rows into segments of detail::segment_length
  // elements; these rows span several, with a partial last one.
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  std::size_t const long_row = 2 * detail::segment_length * ranks + 3;
  for (mesh_shape const& shape : test::meshes_of(ranks)) {
    if (shape.ndim > 2) continue;  // the 2-D meshes already mix two axes
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    for (auto const& from : test::all_layouts(shape, 1, {.partial = {}, .cyclic = {2}}))
      for (auto const& to : test::all_layouts(shape, 1, {.partial = {}, .cyclic = {2}}))
        test::check_redistribution<float, 1>(mesh, from, to, {long_row});
    layout const rows{shard("a"), replicated};
    layout const cols{replicated, shard("a")};
    test::check_redistribution<float, 2>(mesh, rows, cols, {3, long_row});
    test::check_redistribution<float, 2>(mesh, cols, rows, {5, long_row});
  }
}

TEST_CASE("intermediate shards come from the workspace, the result from the given tensor", "[tensor]") {
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  if (ranks < 4 || ranks % 2 != 0) return;
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", 2}, {"b", ranks / 2}});
  // Partial on a and sharded on b, to replicated: a reduction and a gather.
  layout const from = layout{replicated, shard("b")}.partial(reduce_op::sum, "a");
  layout const to{replicated, replicated};
  tensor_index const global{8 * ranks, 8 * ranks};
  REQUIRE(mesh.plan(bind(mesh.shape(), from), bind(mesh.shape(), to))->size() >= 2);
  test::check_redistribution<double, 2>(mesh, from, to, global);
  auto& pool = workspace_of<Kokkos::DefaultExecutionSpace::memory_space>(mesh);
  CHECK(pool.leased_bytes() == 0);
  // Run again: the pool already holds every buffer, so peak lease is bounded by what it holds.
  pool.reset_peak();
  test::check_redistribution<double, 2>(mesh, from, to, global);
  CHECK(pool.peak_leased_bytes() > 0);
  CHECK(pool.peak_leased_bytes() <= pool.pooled_bytes());
  CHECK(pool.leased_bytes() == 0);
}

}  // namespace redistribute_test
