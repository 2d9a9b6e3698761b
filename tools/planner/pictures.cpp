#include "pictures.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace planner_tool {

using shardmesh::parallel::to_string;

namespace {

constexpr char const* palette[] = {"#4878a8", "#e0803c", "#5aa05a", "#c84848", "#8c6cb4", "#8c6448", "#d87cb4"};

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

std::string text(double x, double y, std::string const& s, char const* anchor = "start", int size = 12) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-family=\"sans-serif\" font-size=\"" +
         std::to_string(size) + "\" text-anchor=\"" + anchor + "\">" + s + "</text>\n";
}

std::string rect(double x, double y, double w, double h, char const* fill) {
  return "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) + "\" fill=\"" +
         fill + "\"/>\n";
}

std::vector<judged_plan const*> feasible(std::vector<judged_plan> const& plans) {
  std::vector<judged_plan const*> out;
  for (judged_plan const& p : plans)
    if (p.dropped.empty()) out.push_back(&p);
  return out;
}

// Ticks at 0, 1/4, ... of a rounded-up maximum.
double nice_max(double v) {
  if (v <= 0) return 1;
  double const step = std::pow(10.0, std::floor(std::log10(v)));
  return std::ceil(v / step) * step;
}

}  // namespace

std::string memory_time_svg(std::vector<judged_plan> const& plans) {
  double const width = 720, height = 440, left = 80, right = 160, top = 30, bottom = 60;
  std::vector<judged_plan const*> const ok = feasible(plans);
  double max_ms = 0, max_mib = 0;
  std::size_t max_pp = 1;
  for (judged_plan const* p : ok) {
    max_ms = std::max(max_ms, p->time.total() * 1e3);
    max_mib = std::max(max_mib, static_cast<double>(p->memory_total) / (1 << 20));
    max_pp = std::max(max_pp, p->plan.pp);
  }
  max_ms = nice_max(max_ms), max_mib = nice_max(max_mib);
  double const pw = width - left - right, ph = height - top - bottom;
  auto const x = [&](double v) { return left + pw * v / max_ms; };
  auto const y = [&](double v) { return top + ph * (1 - v / max_mib); };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
                    "\">\n" + rect(0, 0, width, height, "white");
  svg += "<path d=\"M" + num(left) + " " + num(top) + " V" + num(top + ph) + " H" + num(left + pw) +
         "\" stroke=\"black\" fill=\"none\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    svg += text(x(max_ms * i / 4), top + ph + 18, num(max_ms * i / 4), "middle");
    svg += text(left - 8, y(max_mib * i / 4) + 4, num(max_mib * i / 4), "end");
  }
  svg += text(left + pw / 2, height - 20, "predicted step time (ms)", "middle");
  svg += "<text x=\"20\" y=\"" + num(top + ph / 2) +
         "\" font-family=\"sans-serif\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 20 " +
         num(top + ph / 2) + ")\">memory per rank (MiB)</text>\n";
  std::vector<std::size_t> depths;
  for (judged_plan const* p : ok) {
    std::size_t const d = static_cast<std::size_t>(std::log2(static_cast<double>(p->plan.pp)));
    if (std::find(depths.begin(), depths.end(), p->plan.pp) == depths.end()) depths.push_back(p->plan.pp);
    svg += "<circle cx=\"" + num(x(p->time.total() * 1e3)) + "\" cy=\"" +
           num(y(static_cast<double>(p->memory_total) / (1 << 20))) + "\" r=\"3\" fill=\"" +
           palette[d % std::size(palette)] + "\" fill-opacity=\"0.7\"/>\n";
  }
  if (!ok.empty())
    svg +=
        "<circle cx=\"" + num(x(ok.front()->time.total() * 1e3)) + "\" cy=\"" +
        num(y(static_cast<double>(ok.front()->memory_total) / (1 << 20))) +
        "\" r=\"8\" fill=\"none\" stroke=\"black\" stroke-width=\"1.5\"/>\n" +
        text(x(ok.front()->time.total() * 1e3) + 10, y(static_cast<double>(ok.front()->memory_total) / (1 << 20)) - 8,
             "best: " + to_string(ok.front()->plan), "start", 10);
  std::sort(depths.begin(), depths.end());
  for (std::size_t i = 0; i < depths.size(); ++i) {
    std::size_t const d = static_cast<std::size_t>(std::log2(static_cast<double>(depths[i])));
    svg += "<circle cx=\"" + num(width - right + 20) + "\" cy=\"" + num(top + 10 + 20 * static_cast<double>(i)) +
           "\" r=\"4\" fill=\"" + palette[d % std::size(palette)] + "\"/>\n" +
           text(width - right + 30, top + 14 + 20 * static_cast<double>(i), "pp = " + std::to_string(depths[i]));
  }
  return svg + "</svg>\n";
}

std::string parts_svg(std::vector<judged_plan> const& plans, std::size_t best) {
  std::vector<judged_plan const*> ok = feasible(plans);
  if (ok.size() > best) ok.resize(best);
  double const width = 760, row = 34, left = 290, right = 30, top = 20;
  double const height = top + row * static_cast<double>(ok.size()) + 100;
  double max_ms = 0;
  for (judged_plan const* p : ok) max_ms = std::max(max_ms, p->time.total() * 1e3);
  max_ms = nice_max(max_ms);
  double const pw = width - left - right;
  char const* names[] = {"computing", "tensor-parallel collectives", "ZeRO-3 gathers",
                         "bubble",    "data-parallel communication", "update"};
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
                    "\">\n" + rect(0, 0, width, height, "white");
  for (std::size_t i = 0; i < ok.size(); ++i) {
    shardmesh::parallel::step_time const& t = ok[i]->time;
    double const parts[] = {t.compute - t.tensor_parallel - t.parameter_gather,
                            t.tensor_parallel,
                            t.parameter_gather,
                            t.bubble,
                            t.data_parallel,
                            t.optimizer};
    double const y = top + row * static_cast<double>(i);
    svg += text(left - 8, y + 17, to_string(ok[i]->plan), "end", 11);
    double x = left;
    for (std::size_t k = 0; k < std::size(parts); ++k) {
      double const w = pw * std::max(parts[k], 0.0) * 1e3 / max_ms;
      svg += rect(x, y + 4, w, row - 10, palette[k]);
      x += w;
    }
    svg += text(x + 4, y + 17, num(t.total() * 1e3) + " ms", "start", 10);
  }
  double const axis = top + row * static_cast<double>(ok.size()) + 4;
  for (int i = 0; i <= 4; ++i) svg += text(left + pw * i / 4, axis + 14, num(max_ms * i / 4), "middle", 10);
  svg += text(left + pw / 2, axis + 30, "predicted step time (ms)", "middle");
  for (std::size_t k = 0; k < std::size(names); ++k) {  // three to a row
    double const x = 20 + 240 * static_cast<double>(k % 3), y = axis + 42 + 18 * static_cast<double>(k / 3);
    svg += rect(x, y, 10, 10, palette[k]) + text(x + 14, y + 9, names[k], "start", 10);
  }
  return svg + "</svg>\n";
}

}  // namespace planner_tool
