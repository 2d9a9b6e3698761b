// Bad input raises the same typed exception on every rank, before any data
// moves, with a message naming the tensor, the layout and the axis; the
// collectives afterwards show that no rank was left behind.
#include "mpi_test.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace errors_test {

using namespace shardmesh;
using Catch::Matchers::ContainsSubstring;

namespace {

using matrix = dynamic_dtensor<double, 2>;

// Every rank reached this point: a barrier that would hang otherwise.
void all_ranks_continue() {
  int const one = 1;
  int sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  REQUIRE(sum == test::world_size());
}

matrix::view_type shard_of(device_mesh const& mesh, layout const& l, tensor_index const& global) {
  return detail::allocate<matrix::view_type>("x",
                                             local_extents(mesh.shape(), bind(mesh.shape(), l), global, mesh.rank()));
}

}  // namespace

TEST_CASE("a mesh that does not match its communicator", "[tensor][errors]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  REQUIRE_THROWS_MATCHES(
      device_mesh(MPI_COMM_WORLD, mesh_shape{{"dp", ranks + 1}}), invalid_mesh_error,
      Catch::Matchers::MessageMatches(ContainsSubstring("mesh dp=" + std::to_string(ranks + 1)) &&
                                      ContainsSubstring("communicator has " + std::to_string(ranks))));
  REQUIRE_THROWS_AS(device_mesh(MPI_COMM_WORLD, mesh_shape{{"dp"}, {"tp"}}), invalid_mesh_error);
  REQUIRE_THROWS_AS(device_mesh(MPI_COMM_WORLD, mesh_shape{{"dp", ranks}, {"dp", 1}}), invalid_mesh_error);
  all_ranks_continue();
}

TEST_CASE("ranks that give different mesh shapes", "[tensor][errors]") {
  if (test::world_size() < 2) return;
  auto const ranks = static_cast<std::size_t>(test::world_size());
  mesh_shape const shape = test::world_rank() == 1 ? mesh_shape{{"tp", ranks}} : mesh_shape{{"dp", ranks}};
  REQUIRE_THROWS_MATCHES(device_mesh(MPI_COMM_WORLD, shape), invalid_mesh_error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("rank 1 gave a different mesh shape")));
  all_ranks_continue();
}

TEST_CASE("global extents that differ between ranks", "[tensor][errors]") {
  if (test::world_size() < 2) return;
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", ranks}});
  layout const rows{shard("dp"), replicated};
  tensor_index const global{ranks * 2, test::world_rank() == 1 ? std::size_t{5} : std::size_t{4}};
  REQUIRE_THROWS_MATCHES(
      matrix(mesh, rows, {global[0], global[1]}, shard_of(mesh, rows, global)), mismatched_tensor_error,
      Catch::Matchers::MessageMatches(ContainsSubstring("ranks disagree on the global extents") &&
                                      ContainsSubstring("S(dp),R") &&
                                      ContainsSubstring("rank 1 has [" + std::to_string(ranks * 2) + ",5]")));
  all_ranks_continue();
}

TEST_CASE("a local shard with the wrong extents", "[tensor][errors]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", ranks}});
  layout const rows{shard("dp"), replicated};
  tensor_index const global{ranks * 2, 3};
  auto local = shard_of(mesh, rows, global);
  int const bad = test::world_size() - 1;
  if (test::world_rank() == bad) local = matrix::view_type("wrong", 1, 3);
  REQUIRE_THROWS_MATCHES(
      matrix(mesh, rows, {global[0], global[1]}, local), local_extents_error,
      Catch::Matchers::MessageMatches(ContainsSubstring("f64[" + std::to_string(ranks * 2) + ",3] S(dp),R") &&
                                      ContainsSubstring("rank " + std::to_string(bad) + " has [1,3], expected [2,3]")));
  all_ranks_continue();
}

TEST_CASE("a layout on an axis the mesh lacks, chosen at run time", "[tensor][errors]") {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", ranks}});
  layout const rows{shard("dp"), replicated};
  tensor_index const global{ranks, 3};
  matrix const x(mesh, rows, {global[0], global[1]}, shard_of(mesh, rows, global));
  REQUIRE_THROWS_MATCHES(redistribute(x, layout{replicated, shard("tp")}), invalid_layout_error,
                         Catch::Matchers::MessageMatches(
                             ContainsSubstring("dimension 1 is sharded on axis \"tp\", which the mesh lacks") &&
                             ContainsSubstring("f64[")));
  REQUIRE_THROWS_MATCHES(redistribute(x, layout{replicated, replicated}.partial(reduce_op::sum, "dp")),
                         invalid_layout_error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("shard to partial is impossible")));
  all_ranks_continue();
}

TEST_CASE("ranks that ask for different target layouts", "[tensor][errors]") {
  if (test::world_size() < 2) return;
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", ranks}});
  layout const rows{shard("dp"), replicated};
  tensor_index const global{ranks, 3};
  matrix const x(mesh, rows, {global[0], global[1]}, shard_of(mesh, rows, global));
  layout const to = test::world_rank() == 1 ? layout{replicated, replicated} : layout{replicated, shard("dp")};
  REQUIRE_THROWS_MATCHES(redistribute(x, to), mismatched_tensor_error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("rank 1 asked for a different")));
  all_ranks_continue();
}

namespace {

// A row-sharded input and what the output tests need around it.
struct rows_to_cols {
  std::size_t ranks = static_cast<std::size_t>(test::world_size());
  device_mesh mesh{MPI_COMM_WORLD, mesh_shape{{"dp", ranks}}};
  layout rows{shard("dp"), replicated};
  layout cols{replicated, shard("dp")};
  tensor_index global{2 * ranks, 2 * ranks};
  tensor_index wider{2 * ranks, 4 * ranks};
  matrix x{mesh, rows, {global[0], global[1]}, shard_of(mesh, rows, global)};
};

}  // namespace

TEST_CASE("an output tensor that cannot take the result", "[tensor][errors]") {
  rows_to_cols const t;
  auto const& [ranks, mesh, rows, cols, global, wider, x] = t;
  device_mesh const other(MPI_COMM_WORLD, mesh_shape{{"dp", ranks}});
  auto const fails_with = [](auto&& call, std::string const& why) {
    REQUIRE_THROWS_MATCHES(call(), mismatched_tensor_error,
                           Catch::Matchers::MessageMatches(ContainsSubstring("the output of f64[") &&
                                                           ContainsSubstring(why + " on rank 0")));
    all_ranks_continue();
  };
  matrix y(mesh, cols, {wider[0], wider[1]}, shard_of(mesh, cols, wider));
  fails_with([&] { redistribute(x, y); }, "has other global extents");
  matrix z(other, cols, {global[0], global[1]}, shard_of(other, cols, global));
  fails_with([&] { redistribute(x, z); }, "is on another mesh");
  matrix same = x;
  fails_with([&] { redistribute(x, same); }, "shares its memory with the input");
}

TEST_CASE("a root that is not a rank of the mesh", "[tensor][errors]") {
  auto const ranks = test::world_size();
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", static_cast<std::size_t>(ranks)}});
  layout const rows{shard("dp"), replicated};
  Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> const global("global", 4, 3);
  for (int root : {ranks, -2}) {
    REQUIRE_THROWS_MATCHES(distribute(mesh, rows, global, root), invalid_root_error,
                           Catch::Matchers::MessageMatches(ContainsSubstring(
                               "distribute: root " + std::to_string(root) + " is not a rank of the mesh dp=")));
    all_ranks_continue();
  }
  auto const x = distribute(mesh, rows, global);
  REQUIRE_THROWS_MATCHES(gather(x, ranks), invalid_root_error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("gather: root " + std::to_string(ranks)) &&
                                                         ContainsSubstring("f64[4,3] S(dp),R")));
  all_ranks_continue();
}

namespace {

// A row-sharded char matrix of `rows` x 65536 whose shards are allocated
// but never touched: only their extents matter to the checks below.
dynamic_dtensor<char, 2> untouched(device_mesh const& mesh, std::size_t rows) {
  using tensor = dynamic_dtensor<char, 2>;
  layout const l{shard("dp"), replicated};
  tensor_index const global{rows, 65536};
  return tensor(mesh, l, {global[0], global[1]},
                detail::allocate<tensor::view_type>(
                    "untouched", local_extents(mesh.shape(), bind(mesh.shape(), l), global, mesh.rank())));
}

}  // namespace

TEST_CASE("a count beyond MPI's int is refused on every rank before any data moves", "[tensor][errors]") {
  if (test::world_size() < 2) return;
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", ranks}});
  // 2^31 + 65536 chars in all: every rank's all-gathered result overflows.
  auto const x = untouched(mesh, 32769);
  REQUIRE_THROWS_MATCHES(
      redistribute(x, layout{replicated, replicated}), count_overflow_error,
      Catch::Matchers::MessageMatches(ContainsSubstring("[32769,65536] S(dp),R would hand MPI") &&
                                      ContainsSubstring("2147549184 elements in one count on rank 0")));
  all_ranks_continue();
  // Gathered to one rank, only that rank's count overflows: every rank still raises it.
  int const root = test::world_size() - 1;
  REQUIRE_THROWS_MATCHES(gather(x, root), count_overflow_error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("on rank " + std::to_string(root))));
  all_ranks_continue();
}

}  // namespace errors_test
