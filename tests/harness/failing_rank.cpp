// Deliberately failing tests, run only by harness.failing_rank.* which expect
// the whole run to fail quickly with rank 1 named. Without the harness's
// abort and agreement, each would hang: rank 1 skips the barrier the other
// ranks wait in, or the other ranks pass and exit zero.
#include "mpi_test.hpp"

#include <catch2/catch_test_macros.hpp>

#include <mpi.h>

#include <stdexcept>

using shardmesh::test::world_rank;

TEST_CASE("a REQUIRE fails on rank 1 while the others wait in a barrier", "[.][fatal]") {
  REQUIRE(world_rank() != 1);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("an exception escapes on rank 1 while the others wait in a barrier", "[.][exception]") {
  if (world_rank() == 1) throw std::runtime_error("deliberate failure");
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a CHECK fails on rank 1 only", "[.][check]") {
  CHECK(world_rank() != 1);
  MPI_Barrier(MPI_COMM_WORLD);
}
