#include "targets.hpp"

#include <shardmesh/algebra/planner.hpp>

#include <algorithm>
#include <tuple>

namespace plan_tool {

namespace {

using namespace shardmesh;

// What an axis does in a target: nothing, partial, or shards dimension role - 2.
constexpr std::size_t unused = 0;
constexpr std::size_t partial = 1;

// Calls visit(l) for every layout whose dimensions get the axes assigned
// to them (roles) in every order.
template <class Visit>
void for_each_order(request const& r, std::vector<std::size_t> const& axes, std::vector<std::size_t> const& roles,
                    Visit&& visit) {
  std::vector<std::vector<std::size_t>> on(r.rank);
  layout base;
  base.rank = r.rank;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (roles[i] == partial) base.partial_axes.push_back(r.mesh[axes[i]].name);
    if (roles[i] >= 2) on[roles[i] - 2].push_back(axes[i]);
  }
  if (base.is_partial()) base.op = r.from.op;
  for (auto& list : on) std::sort(list.begin(), list.end());
  auto const next = [&](std::size_t d, auto&& self) -> void {
    if (d == r.rank || d == max_tensor_rank) {  // the second tells the compiler dims[d] stays in bounds
      visit(base);
      return;
    }
    do {
      base.dims[d] = {};
      for (std::size_t a : on[d]) base.dims[d].axes.push_back(r.mesh[a].name);
      self(d + 1, self);
    } while (std::next_permutation(on[d].begin(), on[d].end()));
  };
  next(0, next);
}

std::vector<layout> candidates(request const& r) {
  std::vector<std::size_t> axes;  // axes of extent 1 shard nothing
  for (std::size_t a = 0; a < r.mesh.ndim; ++a)
    if (r.mesh.extent(a) > 1) axes.push_back(a);
  std::vector<layout> out;
  std::vector<std::size_t> roles(axes.size(), unused);
  auto const assign = [&](std::size_t i, auto&& self) -> void {
    if (i == axes.size()) {
      for_each_order(r, axes, roles, [&](layout const& l) { out.push_back(l); });
      return;
    }
    for (std::size_t role = 0; role < r.rank + 2; ++role) {
      if (role == partial && !r.from.partial_axes.contains(r.mesh[axes[i]].name.view())) continue;
      roles[i] = role;
      self(i + 1, self);
    }
  };
  assign(0, assign);
  return out;
}

}  // namespace

std::vector<ranked_target> rank_targets(request const& r) {
  bound_layout const source = detail::normalized(r.mesh, bind(r.mesh, r.from));
  std::vector<layout> targets = candidates(r);
  bool const listed = std::any_of(targets.begin(), targets.end(), [&](layout const& l) {
    return detail::normalized(r.mesh, bind(r.mesh, l)) == source;
  });
  if (!listed) targets.insert(targets.begin(), r.from);  // e.g. a cyclic source
  std::vector<ranked_target> out;
  for (layout const& l : targets) {
    if (!transition_problem(r, l).empty()) continue;
    ranked_target t;
    if (!make_report(r, l, t.report).empty()) continue;
    t.is_source = detail::normalized(r.mesh, bind(r.mesh, l)) == source;
    if (t.is_source) t.report.target = r.from;  // as the user wrote it
    out.push_back(std::move(t));
  }
  auto const key = [](ranked_target const& t) {
    redistribution_plan const& p = t.report.plan;
    return std::make_tuple(p.cost, p.peak, p.size(), t.report.most_received(), !t.is_source,
                           std::string(to_string(t.report.target).view()));
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](ranked_target const& a, ranked_target const& b) { return key(a) < key(b); });
  return out;
}

}  // namespace plan_tool
