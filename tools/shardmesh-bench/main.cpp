// shardmesh-bench: times redistributions of a tensor on the MPI ranks it
// runs on, with the persistent redistributor, against the plan's prediction,
// the lower bound and the raw MPI collectives for the same bytes.
//
//   mpirun -n 4 shardmesh-bench --mesh dp=2,tp --shape 1024,1024 --from 'S(dp),R' --to 'R,S(dp)'
//   mpirun -n 4 shardmesh-bench --mesh dp=2,tp=2 --sweep 64KiB..256MiB --from 'S(dp),R' --to 'R,R'
//   mpirun -n 4 shardmesh-bench --mesh dp=2,tp=2 --shape 1024,1024 --from 'S(dp),R' --targets all
//
// Every rank parses and checks the same arguments and refuses bad input
// alike before anything collective runs; rank 0 prints (results on stdout or
// in --output's file, progress and problems on stderr). Exit status: 0, 1
// for input the library refuses, CLI11's codes for usage errors.
#include "measure.hpp"
#include "options.hpp"
#include "results.hpp"
#include "sizes.hpp"

#include "plan/report.hpp"
#include "plan/request.hpp"
#include "plan/targets.hpp"

#include <shardmesh/errors.hpp>
#include <shardmesh/runtime/device_mesh.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace bench_tool;

// The library's messages already name the operation ("shardmesh-bench: ...").
int fail(std::string const& problem, bool speaks) {
  std::string_view const name = "shardmesh-bench: ";
  if (speaks) std::cerr << (problem.starts_with(name) ? "" : name) << problem << std::endl;
  return 1;
}

int run(options const& o, std::size_t me, std::size_t ranks) {
  bool const speaks = me == 0;
  plan_tool::request base;
  if (std::string const problem = make_request(o, base, "shardmesh-bench", ranks); !problem.empty())
    return fail(problem, speaks);
  std::vector<std::size_t> sizes;
  if (!o.sweep.empty()) {
    if (std::string const problem = parse_sweep(o.sweep, base.type.bytes, sizes); !problem.empty())
      return fail(problem, speaks);
  } else {
    std::size_t bytes = base.type.bytes;
    for (std::size_t d = 0; d < base.rank; ++d) bytes *= base.global[d];
    sizes.push_back(bytes);
  }

  // Every case of every size, planned before anything runs.
  std::vector<size_result> runs;
  for (std::size_t bytes : sizes) {
    size_result s;
    s.request = base;
    s.bytes = bytes;
    if (!o.sweep.empty()) s.request.global = shape_for(bytes, base.type.bytes, base.rank);
    if (o.all) {
      std::vector<plan_tool::ranked_target> const targets = plan_tool::rank_targets(s.request);
      for (std::size_t i = 0; i < targets.size(); ++i)
        s.cases.push_back({targets[i].report, targets[i].is_source, i + 1, {}});
    } else {
      case_result c;
      if (std::string const problem = make_report(s.request, s.request.to, c.plan); !problem.empty())
        return fail(problem, speaks);
      c.is_source = c.plan.steps.empty();
      s.cases.push_back(std::move(c));
    }
    runs.push_back(std::move(s));
  }
  std::size_t total = 0;
  for (size_result const& s : runs) total += s.cases.size();

  // Rank 0 opens --output's file before anything is timed; every rank learns
  // whether it could, so a bad path stops them all alike.
  std::ofstream file;
  if (!o.output.empty()) {
    int opened = 0;
    if (speaks) {
      file.open(o.output);
      opened = file.is_open() ? 1 : 0;
    }
    MPI_Bcast(&opened, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (opened == 0) return fail("cannot write --output " + o.output, speaks);
  }

  shardmesh::device_mesh const mesh(MPI_COMM_WORLD, base.mesh);
  settings const how{o.repetitions, o.warmup};
  std::size_t done = 0;
  for (size_result& s : runs)
    for (case_result& c : s.cases) {
      c.measured = measure(mesh, s.request, c.plan, how);
      if (speaks) std::cerr << progress_line(++done, total, s, c) << std::flush;
    }
  if (!speaks) return 0;
  std::ostream& out = o.output.empty() ? std::cout : file;
  out << (o.json ? json_report(o, runs) : text_report(o, runs)) << std::flush;
  return out ? 0 : fail("could not write the report to " + (o.output.empty() ? "stdout" : o.output), speaks);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  // Kokkos takes its --kokkos-* arguments out; it would also print its own
  // help for --help, so that stays with CLI11 alone.
  std::vector<char*> args;
  bool help = false;
  for (int i = 0; i < argc; ++i) {
    std::string_view const arg = argv[i];
    if (i > 0 && (arg == "--help" || arg == "-h"))
      help = true;
    else
      args.push_back(argv[i]);
  }
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(count, args.data());
    args.resize(static_cast<std::size_t>(count));
    static char help_flag[] = "--help";
    if (help) args.push_back(help_flag);
    int me = 0;
    int ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    options o;
    if (auto const done = parse_options(static_cast<int>(args.size()), args.data(), o, me == 0)) {
      status = *done;
    } else {
      try {
        status = run(o, static_cast<std::size_t>(me), static_cast<std::size_t>(ranks));
      } catch (shardmesh::error const& e) {  // raised alike on every rank
        status = fail(e.what(), me == 0);
      } catch (std::exception const& e) {  // perhaps on this rank alone: the others may wait for it
        std::cerr << "shardmesh-bench: rank " << me << ": " << e.what() << std::endl;
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  }
  MPI_Finalize();
  return status;
}
