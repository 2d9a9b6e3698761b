#include "results.hpp"

#include "sizes.hpp"

#include "plan/json.hpp"
#include "plan/text.hpp"

#include <shardmesh/algebra/planner.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace bench_tool {

namespace {

using namespace shardmesh;
using plan_tool::bytes_text;
using plan_tool::number;
using plan_tool::numbers;

std::string format(char const* pattern, double v) {
  char out[48];
  std::snprintf(out, sizeof out, pattern, v);
  return out;
}

std::string ms(double seconds) { return format("%.3g", seconds * 1e3); }

std::string gb_text(std::optional<double> v) { return v ? format("%.3g", *v) : "-"; }

double planned_cost(size_result const& s, case_result const& c) {
  return static_cast<double>(c.plan.plan.cost) / static_cast<double>(global_units(s.request.mesh));
}

std::string layout_text(layout const& l) { return std::string(to_string(l).view()); }

std::string shape_text(plan_tool::request const& r) {
  std::string out;
  for (std::size_t d = 0; d < r.rank; ++d) out += (d == 0 ? "" : ",") + std::to_string(r.global[d]);
  return out;
}

bool as_predicted(case_result const& c) { return c.measured.moved_whole && c.measured.moved == c.plan.total; }

std::string mesh_text(plan_tool::request const& r) {
  std::size_t const n = r.mesh.size();
  return "mesh " + std::string(to_string(r.mesh).view()) + " (" + std::to_string(n) + (n == 1 ? " rank)" : " ranks)");
}

std::string runs_text(options const& o) {
  return "times of the slowest rank over " + std::to_string(o.repetitions) + " runs after " + std::to_string(o.warmup) +
         " warm-up " + (o.warmup == 1 ? "run" : "runs");
}

// Left-aligned columns two spaces apart, indented by two.
std::string table(std::vector<std::vector<std::string>> const& rows) {
  std::vector<std::size_t> width;
  for (auto const& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::string out;
  for (auto const& row : rows) {
    std::string line = " ";
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += " " + row[i];
      if (i + 1 < row.size()) line.append(width[i] - row[i].size() + 1, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string peak_text(case_result const& c) {
  return bytes_text(c.measured.most_peak_extra()) + " (" + bytes_text(c.plan.peak_extra) + ")";
}

std::string mpi_ms(case_result const& c) { return c.measured.mpi_calls.empty() ? "-" : ms(c.measured.mpi.median); }

std::string steps_of(size_result const& s, case_result const& c) {
  if (c.plan.steps.empty()) return "none: a copy";
  return plan_tool::steps_text(s.request, c.plan);
}

std::string footer() {
  return "  GB/s: bytes the busiest rank receives per run / median time. moved: what the busiest rank received\n"
         "  (mesh counters); = plan: every rank received what the plan predicts. peak extra: the workspace's\n"
         "  high-water mark on the busiest rank (the plan's bound). MPI: the plan's collectives on raw MPI, same "
         "bytes.\n";
}

// One transition at one size.
std::string case_block(options const& o, size_result const& s, case_result const& c) {
  measurement const& m = c.measured;
  plan_tool::plan_report const& p = c.plan;
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"plan", c.plan.steps.empty() ? "none: both layouts place every element alike (a copy)"
                                               : plan_tool::steps_text(s.request, p)});
  rows.push_back({"time", "median " + ms(m.time.median) + " ms, min " + ms(m.time.min) + " ms, max " + ms(m.time.max) +
                              " ms (" + runs_text(o) + "; slowest most often: rank " + std::to_string(m.slowest_rank) +
                              ", in " + std::to_string(m.slowest_runs) + " of " + std::to_string(o.repetitions) + ")"});
  auto const gb = gb_per_s(m.most_moved(), m.time.median);
  rows.push_back({"throughput", gb ? gb_text(gb) + " GB/s (bytes the busiest rank receives / median time)"
                                   : "- (nothing moves between ranks)"});
  std::string moved = plan_tool::per_rank_text(m.moved);
  moved += as_predicted(c) ? ", as predicted on every rank" : "; predicted " + plan_tool::per_rank_text(p.total);
  if (p.lower_bound == 0)
    moved += m.most_moved() == 0 ? ", at the lower bound (0 B)" : "; the lower bound is 0 B";
  else
    moved += "; " + format("%.2f", static_cast<double>(m.most_moved()) / static_cast<double>(p.lower_bound)) +
             "x the lower bound (" + bytes_text(p.lower_bound) + " for the busiest rank)";
  rows.push_back({"bytes moved", moved});
  rows.push_back({"peak extra memory", bytes_text(m.most_peak_extra()) +
                                           " (the workspace's high-water mark, busiest rank); the plan's bound " +
                                           bytes_text(p.peak_extra)});
  if (m.mpi_calls.empty()) {
    rows.push_back({"MPI ceiling", "none: the plan sends nothing"});
  } else {
    auto const mpi_gb = gb_per_s(m.most_moved(), m.mpi.median);
    rows.push_back({"MPI ceiling", m.mpi_calls + ", same bytes, no pack or unpack: median " + ms(m.mpi.median) +
                                       " ms, min " + ms(m.mpi.min) + " ms, max " + ms(m.mpi.max) + " ms" +
                                       (mpi_gb ? ", " + gb_text(mpi_gb) + " GB/s" : "") + "; shardmesh at " +
                                       format("%.2f", m.time.median / m.mpi.median) + "x its time"});
  }
  return plan_tool::tensor_name(s.request) + " on " + mesh_text(s.request) + ": " + layout_text(s.request.from) +
         " -> " + layout_text(p.target) + "\n" + table(rows);
}

// One transition over sizes.
std::string sweep_table(options const& o, std::vector<size_result> const& runs) {
  size_result const& first = runs.front();
  case_result const& c0 = first.cases.front();
  std::string out = std::string(first.request.type.name) + " on " + mesh_text(first.request) + ": " +
                    layout_text(first.request.from) + " -> " + layout_text(c0.plan.target) + " (" +
                    steps_of(first, c0) + ")\n  " + runs_text(o) + "\n";
  std::vector<std::vector<std::string>> rows{{"size", "shape", "median ms", "min ms", "max ms", "GB/s", "moved",
                                              "= plan", "lower bound", "peak extra (bound)", "MPI ms", "MPI GB/s",
                                              "x MPI"}};
  for (size_result const& s : runs) {
    case_result const& c = s.cases.front();
    measurement const& m = c.measured;
    bool const mpi = !m.mpi_calls.empty();
    rows.push_back({size_label(s.bytes), shape_text(s.request), ms(m.time.median), ms(m.time.min), ms(m.time.max),
                    gb_text(gb_per_s(m.most_moved(), m.time.median)), bytes_text(m.most_moved()),
                    as_predicted(c) ? "yes" : "no", bytes_text(c.plan.lower_bound), peak_text(c), mpi_ms(c),
                    mpi ? gb_text(gb_per_s(m.most_moved(), m.mpi.median)) : "-",
                    mpi ? format("%.2f", m.time.median / m.mpi.median) : "-"});
  }
  if (mpi_ms(c0) != "-") out += "  MPI: " + c0.measured.mpi_calls + "\n";
  return out + table(rows) + footer();
}

std::string ordering_text(ordering const& g) {
  std::size_t const ordered = g.concordant + g.discordant;
  std::string out = "planned cost against measured time: " + std::to_string(g.concordant) + " of " +
                    std::to_string(ordered) + " pairs of targets of different cost in the measured order, Kendall " +
                    "tau-b " + (g.tau_b ? format("%.2f", *g.tau_b) : std::string("-")) + "\n  " +
                    std::to_string(g.discordant) + (g.discordant == 1 ? " inversion, " : " inversions, ") +
                    std::to_string(g.clear_inversions) + " clear (min-max ranges apart)";
  if (g.tied_in_time != 0) out += "; " + std::to_string(g.tied_in_time) + " pairs measured alike";
  if (g.tied_in_cost != 0) out += "; " + std::to_string(g.tied_in_cost) + " pairs of equal cost left out";
  return out + "\n";
}

// Every target from one source at one size, fastest first.
std::string targets_table(options const& o, size_result const& s) {
  std::string out = plan_tool::tensor_name(s.request) + " on " + mesh_text(s.request) + " from " +
                    layout_text(s.request.from) + ": " + std::to_string(s.cases.size()) +
                    " target layouts, fastest measured first\n  " + runs_text(o) + "\n";
  std::vector<std::vector<std::string>> rows{{"#", "target", "median ms", "min ms", "max ms", "GB/s", "moved", "= plan",
                                              "lower bound", "peak extra (bound)", "MPI ms", "cost", "plan #", "plan"}};
  std::vector<std::size_t> const order = by_measured_time(s.cases);
  for (std::size_t i = 0; i < order.size(); ++i) {
    case_result const& c = s.cases[order[i]];
    measurement const& m = c.measured;
    rows.push_back({std::to_string(i + 1), layout_text(c.plan.target), ms(m.time.median), ms(m.time.min),
                    ms(m.time.max), gb_text(gb_per_s(m.most_moved(), m.time.median)), bytes_text(m.most_moved()),
                    as_predicted(c) ? "yes" : "no", bytes_text(c.plan.lower_bound), peak_text(c), mpi_ms(c),
                    format("%.3g", planned_cost(s, c)), std::to_string(c.planned_position),
                    c.is_source ? "the source: a copy" : steps_of(s, c)});
  }
  return out + table(rows) + footer() + ordering_text(compare_order(s.cases));
}

std::string timing_json(timing const& t) {
  return "{\"median\": " + number(t.median) + ", \"min\": " + number(t.min) + ", \"max\": " + number(t.max) + "}";
}

std::string optional_json(std::optional<double> v) { return v ? number(*v) : "null"; }

std::string case_json(size_result const& s, case_result const& c, std::size_t measured_position) {
  measurement const& m = c.measured;
  std::string const pad = "        ";
  std::string out = pad + "\"source\": " + (c.is_source ? "true" : "false") + ",\n";
  out += pad + "\"measured_position\": " + std::to_string(measured_position) + ",\n";
  out += pad + "\"planned_position\": " + std::to_string(c.planned_position) + ",\n";
  out += pad + "\"time_s\": " + timing_json(m.time) + ",\n";
  out += pad + "\"slowest_rank\": " + std::to_string(m.slowest_rank) + ",\n";
  out += pad + "\"slowest_rank_runs\": " + std::to_string(m.slowest_runs) + ",\n";
  out += pad + "\"gb_per_s\": " + optional_json(gb_per_s(m.most_moved(), m.time.median)) + ",\n";
  out += pad + "\"measured_bytes_per_rank\": " + numbers(m.moved) + ",\n";
  out += pad + "\"measured_bytes_busiest_rank\": " + std::to_string(m.most_moved()) + ",\n";
  out += pad + "\"measured_as_predicted\": " + (as_predicted(c) ? "true" : "false") + ",\n";
  out += pad + "\"measured_peak_extra_bytes_per_rank\": " + numbers(m.peak_extra) + ",\n";
  out += pad + "\"measured_peak_extra_bytes\": " + std::to_string(m.most_peak_extra()) + ",\n";
  if (m.mpi_calls.empty())
    out += pad + "\"mpi\": null,\n";
  else
    out += pad + "\"mpi\": {\"calls\": " + plan_tool::quoted(m.mpi_calls) + ", \"time_s\": " + timing_json(m.mpi) +
           ", \"gb_per_s\": " + optional_json(gb_per_s(m.most_moved(), m.mpi.median)) + "},\n";
  return out + plan_tool::plan_fields(s.request, c.plan, pad);
}

std::string ordering_json(ordering const& g) {
  return "{\"pairs\": " + std::to_string(g.pairs) + ", \"tied_in_cost\": " + std::to_string(g.tied_in_cost) +
         ", \"tied_in_time\": " + std::to_string(g.tied_in_time) + ", \"concordant\": " + std::to_string(g.concordant) +
         ", \"discordant\": " + std::to_string(g.discordant) +
         ", \"clear_inversions\": " + std::to_string(g.clear_inversions) +
         ", \"kendall_tau_b\": " + optional_json(g.tau_b) + "}";
}

}  // namespace

std::optional<double> gb_per_s(std::size_t bytes, double seconds) {
  if (bytes == 0 || seconds <= 0) return std::nullopt;
  return static_cast<double>(bytes) / seconds / 1e9;
}

std::vector<std::size_t> by_measured_time(std::vector<case_result> const& cases) {
  std::vector<std::size_t> order(cases.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return cases[a].measured.time.median < cases[b].measured.time.median;
  });
  return order;
}

ordering compare_order(std::vector<case_result> const& cases) {
  ordering g;
  for (std::size_t i = 0; i < cases.size(); ++i)
    for (std::size_t j = i + 1; j < cases.size(); ++j) {
      ++g.pairs;
      auto const ci = cases[i].plan.plan.cost;
      auto const cj = cases[j].plan.plan.cost;
      timing const& ti = cases[i].measured.time;
      timing const& tj = cases[j].measured.time;
      if (ci == cj) {
        ++g.tied_in_cost;
        continue;
      }
      if (ti.median == tj.median) {
        ++g.tied_in_time;
        continue;
      }
      timing const& cheaper = ci < cj ? ti : tj;
      timing const& dearer = ci < cj ? tj : ti;
      if (cheaper.median < dearer.median) {
        ++g.concordant;
      } else {
        ++g.discordant;
        if (cheaper.min > dearer.max) ++g.clear_inversions;
      }
    }
  // tau-b = (C - D) / sqrt((n0 - n1)(n0 - n2)): n1 pairs tied in cost, n2 in time.
  std::size_t tied_time_all = 0;
  for (std::size_t i = 0; i < cases.size(); ++i)
    for (std::size_t j = i + 1; j < cases.size(); ++j)
      tied_time_all += cases[i].measured.time.median == cases[j].measured.time.median ? 1 : 0;
  double const denominator =
      std::sqrt(static_cast<double>(g.pairs - g.tied_in_cost) * static_cast<double>(g.pairs - tied_time_all));
  if (denominator > 0) g.tau_b = (static_cast<double>(g.concordant) - static_cast<double>(g.discordant)) / denominator;
  return g;
}

std::string progress_line(std::size_t done, std::size_t total, size_result const& s, case_result const& c) {
  std::string out = "shardmesh-bench: [" + std::to_string(done) + "/" + std::to_string(total) + "] " +
                    plan_tool::tensor_name(s.request) + " " + layout_text(s.request.from) + " -> " +
                    layout_text(c.plan.target) + ": median " + ms(c.measured.time.median) + " ms";
  if (!c.measured.mpi_calls.empty()) out += " (MPI " + ms(c.measured.mpi.median) + " ms)";
  return out + "\n";
}

std::string text_report(options const& o, std::vector<size_result> const& runs) {
  if (runs.empty()) return "";
  if (!o.all && runs.size() == 1) return case_block(o, runs.front(), runs.front().cases.front());
  if (!o.all) return sweep_table(o, runs);
  std::string out;
  for (std::size_t i = 0; i < runs.size(); ++i) out += (i == 0 ? "" : "\n") + targets_table(o, runs[i]);
  return out;
}

std::string json_report(options const& o, std::vector<size_result> const& runs) {
  plan_tool::request const& r = runs.front().request;
  std::string out =
      "{\n  \"program\": \"shardmesh-bench\",\n  \"mesh\": " + plan_tool::quoted(to_string(r.mesh)) +
      ",\n  \"ranks\": " + std::to_string(r.mesh.size()) + ",\n  \"type\": " + plan_tool::quoted(r.type.name) +
      ",\n  \"element_bytes\": " + std::to_string(r.type.bytes) +
      ",\n  \"from\": " + plan_tool::quoted(to_string(r.from)) + ",\n  \"targets\": " + (o.all ? "\"all\"" : "null") +
      ",\n  \"repetitions\": " + std::to_string(o.repetitions) + ",\n  \"warmup\": " + std::to_string(o.warmup) +
      ",\n  \"gb_per_s\": \"bytes the busiest rank receives per run / median time, 1 GB = 1e9 B\"" +
      ",\n  \"sizes\": [";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    size_result const& s = runs[i];
    std::vector<std::size_t> shape(s.request.global.begin(),
                                   s.request.global.begin() + static_cast<std::ptrdiff_t>(s.request.rank));
    out += std::string(i == 0 ? "\n" : ",\n") +
           "    {\n      \"tensor\": " + plan_tool::quoted(plan_tool::tensor_name(s.request)) +
           ",\n      \"shape\": " + numbers(shape) + ",\n      \"bytes\": " + std::to_string(s.bytes) +
           ",\n      \"cases\": [";
    std::vector<std::size_t> const order = by_measured_time(s.cases);
    std::vector<std::size_t> position(s.cases.size());
    for (std::size_t k = 0; k < order.size(); ++k) position[order[k]] = k + 1;
    for (std::size_t k = 0; k < s.cases.size(); ++k)
      out += std::string(k == 0 ? "\n" : ",\n") + "      {\n" + case_json(s, s.cases[k], position[k]) + "      }";
    out += "\n      ]";
    if (o.all) out += ",\n      \"ordering\": " + ordering_json(compare_order(s.cases));
    out += "\n    }";
  }
  return out + "\n  ]\n}\n";
}

}  // namespace bench_tool
