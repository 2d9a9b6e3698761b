// shardmesh-plan: plans the redistribution of a tensor between two layouts
// on a device mesh and prints it, or ranks every target layout (--all).
//
//   shardmesh-plan --mesh dp=2,tp=2 --shape 8,6 --from 'S(dp),R' --to 'R,S(dp)' --draw
//
// Exit status: 0, 1 for input the library refuses (its message on stderr),
// CLI11's codes for usage errors.
#include "blocks.hpp"
#include "draw.hpp"
#include "json.hpp"
#include "options.hpp"
#include "page.hpp"
#include "report.hpp"
#include "request.hpp"
#include "svg.hpp"
#include "targets.hpp"
#include "text.hpp"

#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <utility>

namespace {

using namespace plan_tool;

// The library's messages already name the operation ("shardmesh-plan: ...").
int fail(std::string const& problem) {
  std::string_view const name = "shardmesh-plan: ";
  std::cerr << (problem.starts_with(name) ? "" : name) << problem << "\n";
  return 1;
}

int run(options const& o) {
  request r;
  if (std::string const problem = make_request(o, r); !problem.empty()) return fail(problem);

  if (o.all) {
    std::vector<ranked_target> const targets = rank_targets(r);
    std::cout << (o.json ? targets_json(r, targets) : targets_text(r, targets));
    return 0;
  }

  plan_report p;
  if (std::string const problem = make_report(r, r.to, p); !problem.empty()) return fail(problem);
  // Pictures are checked before anything is printed, so a refusal prints nothing else.
  block_grid before;
  block_grid after;
  if (o.draw) {
    before = blocks_of(r, r.from, terminal_block_limit);
    after = blocks_of(r, r.to, terminal_block_limit);
    for (block_grid const* g : {&before, &after})
      if (!g->problem.empty()) return fail("--draw: " + g->problem);
  }
  for (auto const& [flag, path] : {std::pair<std::string, std::string>{"--svg", o.svg}, {"--html", o.html}}) {
    if (path.empty()) continue;
    block_grid const svg_before = blocks_of(r, r.from, svg_block_limit);
    block_grid const svg_after = blocks_of(r, r.to, svg_block_limit);
    for (block_grid const* g : {&svg_before, &svg_after})
      if (!g->problem.empty()) return fail(flag + ": " + g->problem);
    std::string const picture = svg(r, p, svg_before, svg_after);
    std::ofstream file(path);
    file << (flag == "--svg" ? picture : html_page(r, p, picture));
    if (!file.flush()) return fail(flag + " " + path + ": cannot write the file");
  }

  std::cout << (o.json ? plan_json(r, p) : plan_text(r, p));
  if (o.draw)
    std::cout << "\nbefore: " << to_string(r.from).view() << "\n"
              << draw(before) << "\nafter: " << to_string(r.to).view() << "\n"
              << draw(after);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (auto const done = parse_options(argc, argv, o)) return *done;
  return run(o);
}
