// The first thing to run on a new machine: prints what shardmesh runs on and
// checks that Kokkos and MPI agree. Each rank sums its share of 0..n-1 with a
// Kokkos reduction; an MPI all-reduce of those sums must equal n(n-1)/2.
//
//   mpiexec -n 4 build/release/examples/hello_shardmesh
#include <shardmesh/shardmesh.hpp>

#include <cstdint>
#include <cstdio>

namespace {

// Sum of i over this rank's block of [0, n).
std::int64_t local_sum(std::int64_t n, int rank, int ranks) {
  std::int64_t const begin = n * rank / ranks;
  std::int64_t const end = n * (rank + 1) / ranks;
  std::int64_t sum = 0;
  Kokkos::parallel_reduce(
      "hello_shardmesh::local_sum", Kokkos::RangePolicy<Kokkos::IndexType<std::int64_t>>(begin, end),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t& partial) { partial += i; }, sum);
  return sum;
}

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    int rank = 0;
    int ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);

    auto const info = shardmesh::query_runtime_info();
    if (rank == 0) {
      std::printf("shardmesh     %s\n", info.shardmesh_version.c_str());
      std::printf("Kokkos        %s, backend %s, concurrency %d per rank\n", info.kokkos_version.c_str(),
                  info.execution_space.c_str(), info.concurrency);
      std::printf("MPI           %s (MPI %d.%d), %d ranks\n", info.mpi_library.c_str(), info.mpi_version,
                  info.mpi_subversion, ranks);
    }

    std::int64_t const n = 10'000'000;
    std::int64_t const mine = local_sum(n, rank, ranks);
    std::int64_t total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    std::int64_t const expected = n * (n - 1) / 2;
    bool const ok = total == expected;
    if (rank == 0)
      std::printf(
          "check         Kokkos reduction + MPI all-reduce of 0..%lld over %d ranks = %lld, expected %lld: %s\n",
          static_cast<long long>(n - 1), ranks, static_cast<long long>(total), static_cast<long long>(expected),
          ok ? "passed" : "FAILED");
    status = ok ? 0 : 1;
  }
  MPI_Finalize();
  return status;
}
