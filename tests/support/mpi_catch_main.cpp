// Catch2 main for shardmesh's tests. Every test binary runs on 1..N MPI ranks
// and must never hang, so this main
//  - initialises MPI (funneled: only the thread that calls Kokkos talks to MPI)
//    and Kokkos, and finalises them in reverse order;
//  - fixes test order and seed on every rank (rank 0's seed is broadcast), so
//    every rank enters the same collectives in the same order;
//  - reports from rank 0 only; other ranks print just their failures, on
//    stderr, prefixed with their rank;
//  - aborts the whole job on a fatal failure (REQUIRE, unexpected exception,
//    signal) on any rank: that rank skips the rest of its test case, so the
//    others could wait forever in a collective it never enters;
//  - agrees after each test case which ranks failed (non-fatal CHECKs) and
//    exits non-zero on every rank if any rank failed.
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_case_info.hpp>
#include <catch2/reporters/catch_reporter_event_listener.hpp>
#include <catch2/reporters/catch_reporter_registrars.hpp>

#include "mpi_test.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

using shardmesh::test::world_rank;
using shardmesh::test::world_size;

// Set when some rank failed some test case; read after the session.
bool any_rank_failed = false;

class mpi_agreement_listener : public Catch::EventListenerBase {
 public:
  using Catch::EventListenerBase::EventListenerBase;

  void testCaseStarting(Catch::TestCaseInfo const& info) override { test_case_ = info.name; }

  void assertionEnded(Catch::AssertionStats const& stats) override {
    auto const& result = stats.assertionResult;
    if (result.isOk()) return;
    auto const where = result.getSourceInfo();
    std::fprintf(
        stderr, "[rank %d of %d] %s:%zu: FAILED in test case '%s': %s %s\n", world_rank(), world_size(), where.file,
        where.line, test_case_.c_str(), std::string(result.getTestMacroName()).c_str(),
        result.hasExpression() ? result.getExpandedExpression().c_str() : std::string(result.getMessage()).c_str());
    // What INFO and CAPTURE said: the reporter may never print it if we abort.
    for (auto const& info : stats.infoMessages)
      std::fprintf(stderr, "[rank %d of %d]   with: %s\n", world_rank(), world_size(), info.message.c_str());
    bool const continues = (result.m_info.resultDisposition & Catch::ResultDisposition::ContinueOnFailure) != 0;
    if (!continues) abort_all("a fatal assertion failed");
  }

  void fatalErrorEncountered(Catch::StringRef error) override {
    std::fprintf(stderr, "[rank %d of %d] fatal error in test case '%s': %s\n", world_rank(), world_size(),
                 test_case_.c_str(), std::string(error).c_str());
    abort_all("a fatal error occurred");
  }

  // Every rank runs the same test cases in the same order, so this
  // collective matches up; fatal failures never reach it (they abort).
  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    int const failed = stats.totals.assertions.failed > 0 ? 1 : 0;
    std::vector<int> failed_on(static_cast<std::size_t>(world_size()));
    MPI_Allgather(&failed, 1, MPI_INT, failed_on.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::string ranks;
    for (std::size_t r = 0; r < failed_on.size(); ++r)
      if (failed_on[r] != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (ranks.empty()) return;
    any_rank_failed = true;
    if (world_rank() == 0)
      std::fprintf(stderr, "test case '%s' failed on rank(s) %s of %d\n", test_case_.c_str(), ranks.c_str(),
                   world_size());
  }

 private:
  void abort_all(char const* why) const {
    std::fprintf(stderr, "[rank %d of %d] %s in test case '%s': aborting all ranks\n", world_rank(), world_size(), why,
                 test_case_.c_str());
    std::fflush(stderr);
    // Give the launcher a moment to forward this rank's output before the kill.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  std::string test_case_;
};

}  // namespace

CATCH_REGISTER_LISTENER(mpi_agreement_listener)

int main(int argc, char* argv[]) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (provided < MPI_THREAD_FUNNELED) {
    std::fprintf(stderr, "the MPI library provides thread level %d, shardmesh's tests need MPI_THREAD_FUNNELED\n",
                 provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    Catch::Session session;
    auto& config = session.configData();
    config.runOrder = Catch::TestRunOrder::Declared;
    config.rngSeed = 20261130;
    // Each test case is tagged with its file's name ([#training_test]): a binary bundles several files.
    config.filenamesAsTags = true;
    status = session.applyCommandLine(argc, argv);
    if (status == 0) {
      // Whatever the command line chose, all ranks use rank 0's seed.
      MPI_Bcast(&config.rngSeed, 1, MPI_UINT32_T, 0, MPI_COMM_WORLD);
      if (world_rank() != 0) {
        config.reporterSpecifications.clear();
        config.defaultOutputFilename = "/dev/null";
      }
      status = session.run();
    }
    int const failed_here = (status != 0 || any_rank_failed) ? 1 : 0;
    int failed_anywhere = 0;
    MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    status = failed_anywhere;
  }
  MPI_Finalize();
  return status;
}
