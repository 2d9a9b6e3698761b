// The test harness itself: every rank sees the same configuration.
#include "mpi_test.hpp"

#include <catch2/catch_get_random_seed.hpp>
#include <catch2/catch_test_macros.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <vector>

using shardmesh::test::world_rank;
using shardmesh::test::world_size;

namespace {
std::vector<int> ran;  // the test cases of this file, in the order they ran
}

TEST_CASE("MPI is initialised with at least funneled threading", "[harness]") {
  ran.push_back(1);
  int initialized = 0;
  MPI_Initialized(&initialized);
  REQUIRE(initialized == 1);
  int provided = 0;
  MPI_Query_thread(&provided);
  REQUIRE(provided >= MPI_THREAD_FUNNELED);
}

TEST_CASE("Kokkos is initialised", "[harness]") {
  ran.push_back(2);
  REQUIRE(Kokkos::is_initialized());
  REQUIRE(Kokkos::DefaultExecutionSpace().concurrency() >= 1);
}

TEST_CASE("every rank runs with rank 0's random seed", "[harness]") {
  ran.push_back(3);
  unsigned const seed = Catch::getSeed();
  std::vector<unsigned> seeds(static_cast<std::size_t>(world_size()));
  MPI_Allgather(&seed, 1, MPI_UNSIGNED, seeds.data(), 1, MPI_UNSIGNED, MPI_COMM_WORLD);
  for (unsigned s : seeds) CHECK(s == seeds.front());
}

// Each case records itself; with a random order (Catch2's default since 3.9)
// the last case would not see 1, 2, 3, or ranks would disagree.
TEST_CASE("every rank runs the test cases in declaration order", "[harness]") {
  ran.push_back(4);
  REQUIRE(ran == std::vector<int>{1, 2, 3, 4});
}
