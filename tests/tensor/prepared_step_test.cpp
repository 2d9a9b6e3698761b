// What a prepared step decides for MPI: the block form of a reduce-scatter
// exactly when every member's block is equal, a slice copied as one block
// exactly when the piece kept is contiguous, and the largest count checked
// before any data moves. Local computations: one rank, every rank of a mesh.
#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace prepared_step_test {

using namespace shardmesh;

namespace {

plan_step only_step(mesh_shape const& mesh, layout const& from, layout const& to) {
  redistribution_plan const plan = plan_redistribution(mesh, from, to);
  REQUIRE(plan.size() == 1);
  return plan[0];
}

using prepared = detail::prepared_step<Kokkos::HostSpace>;

}  // namespace

TEST_CASE("a reduce-scatter uses the block form exactly when blocks are equal", "[tensor][prepared]") {
  mesh_shape const mesh{{"x", 4}};
  layout const partial = layout{replicated, replicated}.partial(reduce_op::sum, "x");
  plan_step const s = only_step(mesh, partial, layout{shard("x"), replicated});
  REQUIRE(s.kind == step_kind::reduce_scatter);
  for (std::size_t rows : {8UL, 9UL, 3UL})
    for (std::size_t r = 0; r < mesh.size(); ++r) {
      prepared const p = detail::prepare<Kokkos::HostSpace>(mesh, r, s, {rows, 5}, sizeof(double),
                                                            Kokkos::DefaultHostExecutionSpace{});
      REQUIRE(p.equal_blocks == (rows % 4 == 0));
      REQUIRE(p.send_counts.size() == 4);
      REQUIRE(p.send_in_place);  // row blocks of a row-major shard follow one another
    }
}

TEST_CASE("a slice copies one block exactly when the piece kept is contiguous", "[tensor][prepared]") {
  mesh_shape const mesh{{"x", 3}};
  layout const whole{replicated, replicated};
  plan_step const by_rows = only_step(mesh, whole, layout{shard("x"), replicated});
  plan_step const by_cols = only_step(mesh, whole, layout{replicated, shard("x")});
  tensor_index const global{7, 6};  // every rank keeps some columns: no empty piece
  for (std::size_t r = 0; r < mesh.size(); ++r) {
    prepared const rows = detail::prepare<Kokkos::HostSpace>(mesh, r, by_rows, global, sizeof(double),
                                                             Kokkos::DefaultHostExecutionSpace{});
    interval const kept =
        block_interval(mesh, bind(mesh, layout{shard("x"), replicated}).dims[0], 7, coordinates_of(mesh, r));
    REQUIRE(rows.own_at.has_value());
    REQUIRE(*rows.own_at == kept.begin * 6);
    prepared const cols = detail::prepare<Kokkos::HostSpace>(mesh, r, by_cols, global, sizeof(double),
                                                             Kokkos::DefaultHostExecutionSpace{});
    REQUIRE(!cols.own_at.has_value());
  }
}

TEST_CASE("the largest count covers every count and displacement of the step", "[tensor][prepared]") {
  mesh_shape const mesh{{"x", 2}, {"y", 2}};
  plan_step const s = only_step(mesh, layout{shard("x"), shard("y")}, layout{replicated, replicated});
  tensor_index const global{5, 3};
  for (std::size_t r = 0; r < mesh.size(); ++r) {
    prepared const p =
        detail::prepare<Kokkos::HostSpace>(mesh, r, s, global, sizeof(double), Kokkos::DefaultHostExecutionSpace{});
    REQUIRE(p.largest_count == 15);  // the gathered result
    std::size_t total = 0;
    for (std::size_t c : p.recv_counts) total += c;
    REQUIRE(total <= p.largest_count);
  }
}

}  // namespace prepared_step_test
