// The runtime against the serial reference, for every pair of layouts of
// rank-2 tensors on 1-D and 2-D meshes of this run's ranks (and a sample on
// 2x2x2), with even, uneven and smaller-than-mesh extents.
#include "redistribution_check.hpp"

#include <catch2/catch_test_macros.hpp>

#include <cstdio>

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
