// Google Benchmark main for shardmesh's benchmarks on MPI ranks: initialises
// MPI and Kokkos, runs the same benchmarks on every rank, reports from rank 0.
// Every benchmark times itself with max_over_ranks (manual time), so all ranks
// see the same times and Google Benchmark picks the same iteration counts on
// every rank: their collectives always match. The exit status is 1 if a
// benchmark reported an error.
#include "deferred_registration.hpp"

#include <benchmark/benchmark.h>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <shardmesh/runtime_info.hpp>

#include <algorithm>
#include <string_view>
#include <vector>

namespace {

class silent_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(Context const&) override { return true; }
  void ReportRuns(std::vector<Run> const&) override {}
};

// The console reporter, flushing after every benchmark and remembering
// whether one failed (a check inside it called SkipWithError), so that the
// run's exit status shows it.
class checking_reporter : public benchmark::ConsoleReporter {
 public:
  // No colour: under mpirun every rank's output looks like a terminal, even when piped.
  checking_reporter() : ConsoleReporter(OO_None) {}
  void ReportRuns(std::vector<Run> const& runs) override {
    for (Run const& run : runs) failed = failed || run.skipped == benchmark::internal::SkippedWithError;
    ConsoleReporter::ReportRuns(runs);
    GetOutputStream().flush();  // progress, also when piped
  }
  bool failed = false;
};

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
    // Only rank 0 writes --benchmark_out; the others drop the flag.
    if (rank != 0)
      argc = static_cast<int>(
          std::remove_if(argv + 1, argv + argc,
                         [](char const* arg) { return std::string_view(arg).starts_with("--benchmark_out"); }) -
          argv);
    bool const listing = std::any_of(argv + 1, argv + argc, [](char const* arg) {
      return std::string_view(arg).starts_with("--benchmark_list_tests");
    });
    for (auto const registration : shardmesh::bench::deferred_registrations()) registration();
    benchmark::Initialize(&argc, argv);
    benchmark::AddCustomContext("shardmesh_runtime", shardmesh::to_string(shardmesh::query_runtime_info()));
    benchmark::AddCustomContext("mpi_ranks", std::to_string(ranks));
    if (rank == 0) {
      checking_reporter display;
      benchmark::RunSpecifiedBenchmarks(&display);
      status = display.failed ? 1 : 0;
    } else if (!listing) {  // when listing, only rank 0 prints and nothing runs
      silent_reporter display;
      benchmark::RunSpecifiedBenchmarks(&display);
    }
    benchmark::Shutdown();
  }
  MPI_Finalize();
  return status;
}
