#include "report.hpp"

#include <shardmesh/algebra/axis_groups.hpp>
#include <shardmesh/algebra/plan_traffic.hpp>

#include <algorithm>
#include <cstdio>

namespace plan_tool {

namespace {

using namespace shardmesh;

// Elements `rank` sends to the other members of step s's group in an
// all-to-all(-v): what they take from it (holds_for picks the one sender).
std::size_t sent(mesh_shape const& mesh, plan_step const& s, tensor_index const& global, std::size_t rank) {
  std::size_t n = 0;
  for (std::size_t to = 0; to < mesh.size(); ++to)
    if (to != rank && holds_for(mesh, s.before, rank, to))
      n += detail::overlap(mesh, s.after, to, s.before, rank, global);
  return n;
}

// Pack and receive buffers of step s on `rank`, in elements, as if the
// collective could work in place on neither side.
std::size_t staging(mesh_shape const& mesh, plan_step const& s, tensor_index const& global, std::size_t rank) {
  switch (s.kind) {
    case step_kind::all_gather: return local_size(mesh, s.after, global, rank);
    case step_kind::reduce_scatter: return local_size(mesh, s.before, global, rank);
    case step_kind::all_to_all:
    case step_kind::all_to_all_v: return sent(mesh, s, global, rank) + received(mesh, s, global, rank);
    default: return 0;
  }
}

// In elements; see plan_report::peak_extra.
std::size_t peak_extra(request const& r, redistribution_plan const& plan) {
  std::size_t peak = 0;
  for (std::size_t i = 0; i < plan.size(); ++i)
    for (std::size_t rank = 0; rank < r.mesh.size(); ++rank) {
      plan_step const& s = plan[i];
      std::size_t extra = staging(r.mesh, s, r.global, rank);
      if (i > 0) extra += local_size(r.mesh, s.before, r.global, rank);
      if (i + 1 < plan.size()) extra += local_size(r.mesh, s.after, r.global, rank);
      peak = std::max(peak, extra);
    }
  return peak;
}

}  // namespace

std::size_t most(std::vector<std::size_t> const& by_rank) {
  return by_rank.empty() ? 0 : *std::max_element(by_rank.begin(), by_rank.end());
}

std::size_t least(std::vector<std::size_t> const& by_rank) {
  return by_rank.empty() ? 0 : *std::min_element(by_rank.begin(), by_rank.end());
}

std::size_t plan_report::most_received() const { return most(total); }

std::string make_report(request const& r, layout const& to, plan_report& out) {
  mesh_shape const& mesh = r.mesh;
  bound_layout const from = detail::normalized(mesh, bind(mesh, r.from));
  bound_layout const target = detail::normalized(mesh, bind(mesh, to));
  out = {};
  out.target = to;
  out.plan = plan_redistribution(mesh, from, target);
  if (out.plan.size() == 0 && from != target)
    return "no plan takes " + std::string(to_string(mesh, from).view()) + " to " +
           std::string(to_string(mesh, target).view()) + " on mesh " + std::string(to_string(mesh).view());
  std::size_t const bytes = r.type.bytes;
  out.total.assign(mesh.size(), 0);
  for (std::size_t i = 0; i < out.plan.size(); ++i) {
    step_report s{out.plan[i], std::vector<std::size_t>(mesh.size(), 0)};
    for (std::size_t rank = 0; rank < mesh.size(); ++rank) {
      s.bytes[rank] = received(mesh, s.step, r.global, rank) * bytes;
      out.total[rank] += s.bytes[rank];
    }
    out.steps.push_back(std::move(s));
  }
  out.lower_bound = transition_lower_bound(mesh, from, target, r.global) * bytes;
  out.peak_extra = peak_extra(r, out.plan) * bytes;
  return "";
}

std::string bytes_text(std::size_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  char const* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes) / 1024;
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char out[32];
  std::snprintf(out, sizeof out, "%.3g %s", value, units[unit]);
  return out;
}

std::string per_rank_text(std::vector<std::size_t> const& by_rank) {
  std::size_t const lo = least(by_rank);
  std::size_t const hi = most(by_rank);
  if (lo == hi) return bytes_text(hi) + " per rank";
  return bytes_text(lo) + " to " + bytes_text(hi) + " per rank";
}

std::string against_bound_text(plan_report const& p) {
  std::size_t const moved = p.most_received();
  if (p.lower_bound == 0) return moved == 0 ? "at the lower bound" : "the lower bound is 0 B";
  char out[64];
  std::snprintf(out, sizeof out, "%.2fx the lower bound",
                static_cast<double>(moved) / static_cast<double>(p.lower_bound));
  return out;
}

}  // namespace plan_tool
