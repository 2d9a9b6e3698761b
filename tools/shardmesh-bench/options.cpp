#include "options.hpp"

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace bench_tool {

std::optional<int> parse_options(int argc, char const* const* argv, options& out, bool speaks) {
  CLI::App app{
      "Times redistributions of a tensor on the MPI ranks it runs on, with the persistent redistributor: the "
      "slowest rank's time (median, min, max), GB/s, the bytes moved against the planner's prediction and the "
      "lower bound, the peak extra memory, and the raw MPI collectives' time for the same bytes. Run it under "
      "mpirun.",
      "shardmesh-bench"};
  app.footer(
      "Examples:\n"
      "  mpirun -n 4 shardmesh-bench --mesh dp=2,tp --shape 1024,1024 --from 'S(dp),R' --to 'R,S(dp)'\n"
      "  mpirun -n 4 shardmesh-bench --mesh dp=2,tp=2 --sweep 64KiB..256MiB --from 'S(dp),R' --to 'R,R'\n"
      "  mpirun -n 4 shardmesh-bench --mesh dp=2,tp=2 --shape 1024,1024 --from 'S(dp),R' --targets all\n"
      "Layouts use shardmesh's notation (docs/01-layouts.md). --sweep sizes are global tensor sizes in bytes, "
      "powers of two; a size of 2^k elements has extents 2^(k/rank), the leading k % rank dimensions twice "
      "that (f32, 1MiB, rank 2: 512,512). GB/s: bytes the busiest rank receives per redistribution over the "
      "median time.");
  std::vector<std::string> types;
  for (plan_tool::element_type const& t : plan_tool::element_types) types.emplace_back(t.name);
  std::string targets;

  app.add_option("--mesh", out.mesh, "mesh axes and extents; one may be left to the number of ranks: dp=2,tp")
      ->required()
      ->type_name("AXES");
  auto* shape =
      app.add_option("--shape", out.shape, "global extents of the tensor, e.g. 1024,1024")->type_name("EXTENTS");
  auto* sweep = app.add_option("--sweep", out.sweep, "global sizes in bytes, doubling: 64KiB..256MiB (or one size)")
                    ->type_name("FROM..TO");
  app.add_option("--type", out.type, "element type")
      ->check(CLI::IsMember(types))
      ->capture_default_str()
      ->type_name("TYPE");
  app.add_option("--from", out.from, "layout of the tensor, e.g. 'S(dp),R'")->required()->type_name("LAYOUT");
  auto* to = app.add_option("--to", out.to, "layout to move it to, e.g. 'R,S(dp)'")->type_name("LAYOUT");
  auto* all = app.add_option("--targets", targets,
                             "all: every valid target layout from --from (as shardmesh-plan --all lists them), "
                             "ranked by measured time next to the planned cost")
                  ->check(CLI::IsMember({"all"}))
                  ->type_name("all");
  app.add_option("--repetitions", out.repetitions, "timed runs of each case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->type_name("N");
  app.add_option("--warmup", out.warmup, "untimed runs before them")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->type_name("N");
  app.add_flag("--json", out.json, "print one JSON document (for scripts); progress stays on stderr");
  app.add_option("--output", out.output,
                 "write the report to this file instead of stdout (rank 0 writes it; a launcher that forwards "
                 "the ranks' stdout and stderr may interleave them)")
      ->type_name("FILE");
  all->excludes(to);
  shape->excludes(sweep);

  std::ostringstream quiet;
  try {
    app.parse(argc, argv);
    if (targets.empty() && out.to.empty()) throw CLI::RequiredError("--to (or --targets all)");
    if (out.shape.empty() && out.sweep.empty()) throw CLI::RequiredError("--shape (or --sweep)");
  } catch (CLI::ParseError const& e) {
    return speaks ? app.exit(e) : app.exit(e, quiet, quiet);
  }
  out.all = targets == "all";
  return std::nullopt;
}

}  // namespace bench_tool
