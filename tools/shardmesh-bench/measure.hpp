#pragma once
// Timing one transition on the ranks this runs on: the persistent
// redistributor (checked and planned once) between barriers, the slowest
// rank's time per run; the mesh's counters and memory ledger over the timed
// runs; and, run by run beside it, the plan's collectives called on raw MPI
// with the same bytes: the ceiling.

#include "plan/report.hpp"
#include "plan/request.hpp"

#include <shardmesh/runtime/device_mesh.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace bench_tool {

// Seconds.
struct timing {
  double median = 0;
  double min = 0;
  double max = 0;
};

[[nodiscard]] timing summarize(std::vector<double> seconds);

struct settings {
  std::size_t repetitions = 20;
  std::size_t warmup = 3;
};

// What one case measured; the same on every rank.
struct measurement {
  timing time;                          // the slowest rank's time per redistribution
  std::size_t slowest_rank = 0;         // the rank slowest in most runs (the lowest of equals)
  std::size_t slowest_runs = 0;         // in how many
  std::vector<std::size_t> moved;       // bytes received per redistribution, by rank (mesh.counters())
  bool moved_whole = true;              // each rank's count over the runs was a whole multiple of the runs
  std::vector<std::size_t> peak_extra;  // workspace high-water mark over the timed runs, by rank (mesh.ledger())
  std::string mpi_calls;                // "MPI_Alltoall(dp)": the ceiling's calls; "" when the plan sends nothing
  timing mpi;                           // their slowest rank's time per run

  [[nodiscard]] std::size_t most_moved() const;
  [[nodiscard]] std::size_t most_peak_extra() const;
};

// Times r.from -> p.target (planned by make_report for r) on `mesh`, whose
// shape is r.mesh and whose communicator is MPI_COMM_WORLD's ranks.
// Collective: every rank calls it with the same arguments.
[[nodiscard]] measurement measure(shardmesh::device_mesh const& mesh, plan_tool::request const& r,
                                  plan_tool::plan_report const& p, settings const& s);

}  // namespace bench_tool
