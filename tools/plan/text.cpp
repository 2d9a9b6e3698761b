#include "text.hpp"

#include <shardmesh/algebra/planner.hpp>

#include <algorithm>

namespace plan_tool {

namespace {

using namespace shardmesh;

std::string padded(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

std::string step_text(request const& r, step_report const& s) {
  return std::string(to_string(r.mesh, s.step.before).view()) + " -> " +
         std::string(to_string(r.mesh, s.step.after).view()) + ": " + std::string(to_string(r.mesh, s.step).view()) +
         ", " + std::string(bytes_phrase(r.mesh, s.step).view()) +
         (most(s.bytes) == 0 ? "" : ", " + per_rank_text(s.bytes));
}

std::string steps_text(request const& r, plan_report const& p) {
  std::string out;
  for (auto const& s : p.steps) out += (out.empty() ? "" : ", then ") + std::string(to_string(r.mesh, s.step).view());
  return out;
}

std::string summary_text(plan_report const& p) {
  return "total " + per_rank_text(p.total) + ", " + against_bound_text(p) + " (" + bytes_text(p.lower_bound) +
         " for the busiest rank)\npeak extra memory " + bytes_text(p.peak_extra) +
         " per rank (intermediate shards, pack and receive buffers; at most)";
}

std::string plan_text(request const& r, plan_report const& p) {
  std::string out = tensor_name(r) + " on mesh " + std::string(to_string(r.mesh).view()) + ": " +
                    std::string(to_string(r.from).view()) + " -> " + std::string(to_string(p.target).view()) + "\n";
  if (p.steps.empty()) out += "  no steps: both layouts place every element alike\n";
  for (std::size_t i = 0; i < p.steps.size(); ++i)
    out += "  " + std::to_string(i + 1) + ". " + step_text(r, p.steps[i]) + "\n";
  return out + summary_text(p) + "\n";
}

std::string targets_text(request const& r, std::vector<ranked_target> const& targets) {
  std::string out = tensor_name(r) + " on mesh " + std::string(to_string(r.mesh).view()) + " from " +
                    std::string(to_string(r.from).view()) + ": " + std::to_string(targets.size()) +
                    " target layouts, cheapest plan first\n";
  std::size_t width = std::string_view("target").size();
  for (auto const& t : targets) width = std::max(width, to_string(t.report.target).view().size());
  std::string const number_width(std::to_string(targets.size()).size(), ' ');
  out += "  " + number_width + "  " + padded("target", width) + "  " + padded("busiest rank", 14) +
         padded("lower bound", 13) + "plan\n";
  for (std::size_t i = 0; i < targets.size(); ++i) {
    plan_report const& p = targets[i].report;
    std::string const steps = targets[i].is_source ? "the source: nothing to do" : steps_text(r, p);
    std::string const n = std::to_string(i + 1);
    out += "  " + std::string(number_width.size() - n.size(), ' ') + n + "  " +
           padded(std::string(to_string(p.target).view()), width) + "  " + padded(bytes_text(p.most_received()), 14) +
           padded(bytes_text(p.lower_bound), 13) + steps + "\n";
  }
  return out;
}

}  // namespace plan_tool
