#include "options.hpp"

#include "request.hpp"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace plan_tool {

std::optional<int> parse_options(int argc, char const* const* argv, options& out) {
  CLI::App app{
      "Plans the redistribution of a tensor from one layout to another on a device mesh: prints the steps, "
      "the bytes each rank receives, the total against the lower bound and the peak extra memory.",
      "shardmesh-plan"};
  app.footer(
      "Example:\n  shardmesh-plan --mesh dp=2,tp=2 --shape 8,6 --from 'S(dp),R' --to 'R,S(dp)' --draw\n"
      "Layouts use shardmesh's notation (docs/01-layouts.md): R, S(dp), S(dp,tp), C64(tp), and a suffix "
      "' P(sum:tp)' for partial sums.");
  std::vector<std::string> types;
  for (element_type const& t : element_types) types.emplace_back(t.name);

  app.add_option("--mesh", out.mesh, "mesh axes and extents, e.g. dp=2,tp=2")->required()->type_name("AXES");
  app.add_option("--shape", out.shape, "global extents of the tensor, e.g. 8,6")->required()->type_name("EXTENTS");
  app.add_option("--type", out.type, "element type")
      ->check(CLI::IsMember(types))
      ->capture_default_str()
      ->type_name("TYPE");
  app.add_option("--from", out.from, "layout of the tensor now, e.g. 'S(dp),R'")->required()->type_name("LAYOUT");
  auto* to = app.add_option("--to", out.to, "layout to move it to, e.g. 'R,S(dp)'")->type_name("LAYOUT");
  auto* all = app.add_flag("--all", out.all, "rank every block layout of the shape by planned cost (instead of --to)");
  auto* json = app.add_flag("--json", out.json, "print one JSON document (for scripts)");
  auto* draw = app.add_flag("--draw", out.draw, "draw which ranks hold each block, before and after (rank 1 or 2)");
  auto* svg = app.add_option("--svg", out.svg, "write the pictures and the plan to an SVG file (rank 1 or 2)")
                  ->type_name("FILE");
  auto* html =
      app.add_option("--html", out.html, "write the pictures and the plan to a page (rank 1 or 2)")->type_name("FILE");
  all->excludes(to);
  draw->excludes(all)->excludes(json);
  svg->excludes(all);
  html->excludes(all);
  try {
    app.parse(argc, argv);
    if (!out.all && out.to.empty()) throw CLI::RequiredError("--to (or --all)");
  } catch (CLI::ParseError const& e) {
    return app.exit(e);
  }
  return std::nullopt;
}

}  // namespace plan_tool
