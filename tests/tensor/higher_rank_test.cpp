// Rank-3 and rank-4 tensors: a sample of about `pairs` layout pairs on every
// mesh of this run's ranks (evenly strided through all pairs), against the
// serial reference.
#include "redistribution_check.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace higher_rank_test {

using namespace shardmesh;

namespace {

// Returns how many were checked; `windows` adds the bytes of the node
// windows the meshes made.
template <std::size_t Rank>
std::size_t check_sample(std::size_t pairs,
                         strided_all_to_all_algorithm algorithm = strided_all_to_all_algorithm::automatic,
                         std::size_t* windows = nullptr) {
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  std::size_t checked = 0;
  std::size_t index = 0;
  for (mesh_shape const& shape : test::meshes_of(ranks)) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    mesh.state<collective_tuning>().prefer(algorithm);
    INFO("strided all-to-alls: " << static_cast<int>(algorithm));
    auto const layouts = test::all_layouts(shape, Rank, {.partial = {reduce_op::sum}, .cyclic = {2}});
    std::size_t const stride = std::max<std::size_t>(1, layouts.size() * layouts.size() / pairs);
    for (auto const& from : layouts)
      for (auto const& to : layouts) {
        if (index++ % stride != 0 || !transition_error("", shape, from, to).empty()) continue;
        for (tensor_index const& global : test::extents_for<Rank>(ranks)) {
          test::check_redistribution<double, Rank>(mesh, from, to, global);
          ++checked;
        }
      }
    if (windows != nullptr) *windows += mesh.state<shardmesh::detail::node_windows>().bytes();
  }
  return checked;
}

}  // namespace

TEST_CASE("rank-3 tensors redistribute exactly", "[tensor][rank3]") { CHECK(check_sample<3>(600) > 0); }

// Pieces strided on both sides go through MPI_Alltoallw or a node window
// (its copies cached or streaming), as measured: each forced on its own.
TEST_CASE("rank-3 tensors redistribute exactly through datatypes and through node windows", "[tensor][rank3]") {
  std::size_t windows = 0;
  CHECK(check_sample<3>(200, strided_all_to_all_algorithm::datatypes, &windows) > 0);
  CHECK(windows == 0);
  for (auto const a :
       {strided_all_to_all_algorithm::node_window, strided_all_to_all_algorithm::node_window_streaming}) {
    windows = 0;
    CHECK(check_sample<3>(200, a, &windows) > 0);
    if (test::world_size() > 1) CHECK(windows > 0);  // some pairs went through a window
  }
}

TEST_CASE("rank-4 tensors redistribute exactly", "[tensor][rank4]") { CHECK(check_sample<4>(300) > 0); }

}  // namespace higher_rank_test
