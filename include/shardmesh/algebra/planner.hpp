#pragma once
// The redistribution planner: the cheapest sequence of primitive steps from
// one layout to another. A shortest-path search (Dijkstra) over layout
// states; a path costs alpha per communicating step plus the bytes a rank
// receives, as exact fractions of the global tensor (plan_step.hpp), so the
// choice does not depend on the tensor's size and runs at compile time when
// mesh and layouts are constants. Ties go to the path with the smaller peak
// local shard, then to the one with fewer steps.
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/algebra/validation.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardmesh {

inline constexpr std::size_t max_plan_steps = 16;

struct redistribution_plan {
  std::array<plan_step, max_plan_steps> steps{};
  std::size_t count = 0;
  std::uint64_t cost = 0;   // alpha per communicating step + bytes, in global_units
  std::uint64_t bytes = 0;  // bytes a rank receives over all steps, in global_units
  std::uint64_t peak = 0;   // largest local shard along the way, in 1/size of the tensor

  [[nodiscard]] constexpr plan_step const& operator[](std::size_t i) const { return steps[i]; }
  [[nodiscard]] constexpr std::size_t size() const { return count; }
  [[nodiscard]] constexpr std::size_t communicating_steps() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < count; ++i) n += communicates(steps[i].kind) ? 1U : 0U;
    return n;
  }
};

namespace detail {

constexpr void append_axis(bound_dim& dim, std::size_t a) { dim.axes[dim.count++] = static_cast<unsigned char>(a); }

// What the generators of one kind of step read: the mesh, the state, the
// target, every axis and the free ones (neither sharding nor partial, and
// not of extent 1).
struct step_context {
  mesh_shape const& mesh;
  bound_layout const& state;
  bound_layout const& target;
  axis_set all, free;

  // A step of this kind over these axes, its `after` the state until the generator changes it.
  [[nodiscard]] constexpr plan_step make(step_kind kind, axis_set axes) const {
    plan_step s;
    s.kind = kind;
    s.axes = axes;
    s.before = state;
    s.after = state;
    return s;
  }
};

// slice: a free axis refines a block dimension; or a dimension the target
// deals cyclically is dealt at once from replicated.
template <class Visit>
constexpr void slice_steps(step_context const& c, Visit&& visit) {
  auto const& [mesh, state, target, all, free] = c;
  for (std::size_t a = 0; a < mesh.ndim; ++a) {
    if (!free.contains(a)) continue;
    for (std::size_t d = 0; d < state.rank; ++d) {
      if (state.dims[d].dist != distribution::block) continue;
      plan_step s = c.make(step_kind::slice, axis_set::of(a));
      s.to_dim = d;
      append_axis(s.after.dims[d], a);
      visit(s);
    }
  }
  for (std::size_t d = 0; d < state.rank; ++d) {
    bound_dim const& want = target.dims[d];
    if (state.dims[d].count != 0 || want.dist != distribution::cyclic) continue;
    axis_set axes;
    for (std::size_t i = 0; i < want.count; ++i) axes.insert(want.axes[i]);
    if (!(axes - free).empty()) continue;
    plan_step s = c.make(step_kind::slice, axes);
    s.to_dim = d;
    s.after.dims[d] = want;
    visit(s);
  }
}

// all_gather: a suffix of each dimension's axes (the whole list for cyclic
// dimensions), at least one axis in all.
template <class Visit>
constexpr void all_gather_steps(step_context const& c, Visit&& visit) {
  auto const& [mesh, state, target, all, free] = c;
  std::array<std::size_t, max_tensor_rank> cut{};
  while (true) {
    std::size_t d = 0;
    for (; d < state.rank; ++d) {
      bound_dim const& dim = state.dims[d];
      std::size_t const step = dim.dist == distribution::cyclic ? dim.count : 1;
      if (dim.count != 0 && cut[d] + step <= dim.count) {
        cut[d] += step;
        break;
      }
      cut[d] = 0;
    }
    if (d == state.rank) break;
    plan_step s = c.make(step_kind::all_gather, {});
    for (std::size_t e = 0; e < state.rank; ++e) {
      bound_dim& dim = s.after.dims[e];
      for (std::size_t i = dim.count - cut[e]; i < dim.count; ++i) s.axes.insert(dim.axes[i]);
      dim.count = static_cast<unsigned char>(dim.count - cut[e]);
      if (dim.count == 0) dim = bound_dim{};
    }
    visit(s);
  }
}

// all_to_all: a suffix of block dimension d0 moves to the end of block dimension d1.
template <class Visit>
constexpr void all_to_all_steps(step_context const& c, Visit&& visit) {
  auto const& [mesh, state, target, all, free] = c;
  for (std::size_t d0 = 0; d0 < state.rank; ++d0) {
    bound_dim const& from = state.dims[d0];
    if (from.dist != distribution::block) continue;
    for (std::size_t k = 1; k <= from.count; ++k)
      for (std::size_t d1 = 0; d1 < state.rank; ++d1) {
        if (d1 == d0 || state.dims[d1].dist != distribution::block) continue;
        plan_step s = c.make(step_kind::all_to_all, {});
        s.from_dim = d0;
        s.to_dim = d1;
        for (std::size_t i = from.count - k; i < from.count; ++i) {
          s.axes.insert(from.axes[i]);
          append_axis(s.after.dims[d1], from.axes[i]);
        }
        s.after.dims[d0].count = static_cast<unsigned char>(from.count - k);
        visit(s);
      }
  }
}

// all_reduce and reduce_scatter: any non-empty subset of the partial axes;
// reduce_scatter appends them to a block dimension in every order.
template <class Visit>
constexpr void reduce_steps(step_context const& c, Visit&& visit) {
  auto const& [mesh, state, target, all, free] = c;
  unsigned const partial = state.partial_axes.bits;
  for (axis_set g{partial}; !g.empty(); g = {(g.bits - 1) & partial}) {  // every non-empty subset
    plan_step reduce = c.make(step_kind::all_reduce, g);
    reduce.after.partial_axes -= g;
    visit(reduce);
    std::array<unsigned char, max_mesh_axes> order{};
    std::size_t n = 0;
    for (std::size_t a = 0; a < mesh.ndim; ++a)
      if (g.contains(a)) order[n++] = static_cast<unsigned char>(a);
    do {
      for (std::size_t d = 0; d < state.rank; ++d) {
        if (state.dims[d].dist != distribution::block) continue;
        plan_step s = c.make(step_kind::reduce_scatter, g);
        s.after.partial_axes -= g;
        s.to_dim = d;
        for (std::size_t i = 0; i < n; ++i) append_axis(s.after.dims[d], order[i]);
        visit(s);
      }
    } while (std::next_permutation(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n)));
  }
}

// to_partial: a free axis the target is partial on.
template <class Visit>
constexpr void to_partial_steps(step_context const& c, Visit&& visit) {
  auto const& [mesh, state, target, all, free] = c;
  if (state.partial_axes.empty() || state.op == target.op)
    for (std::size_t a = 0; a < mesh.ndim; ++a) {
      if (!free.contains(a) || !target.partial_axes.contains(a)) continue;
      plan_step s = c.make(step_kind::to_partial, axis_set::of(a));
      s.after.partial_axes.insert(a);
      s.after.op = target.op;
      visit(s);
    }
}

// permute: two axes of equal extent and different roles swap them.
template <class Visit>
constexpr void permute_steps(step_context const& c, Visit&& visit) {
  auto const& [mesh, state, target, all, free] = c;
  for (std::size_t x = 0; x < mesh.ndim; ++x)
    for (std::size_t y = x + 1; y < mesh.ndim; ++y) {
      if (mesh.extent(x) != mesh.extent(y)) continue;
      bool const both_free = free.contains(x) && free.contains(y);
      bool const both_partial = state.partial_axes.contains(x) && state.partial_axes.contains(y);
      if (both_free || both_partial) continue;
      axis_set const pair = axis_set::of(x) | axis_set::of(y);
      plan_step s = c.make(step_kind::permute, pair);
      for (std::size_t d = 0; d < state.rank; ++d)
        for (std::size_t i = 0; i < state.dims[d].count; ++i) {
          auto& a = s.after.dims[d].axes[i];
          a = static_cast<unsigned char>(a == x ? y : a == y ? x : a);
        }
      s.after.partial_axes = state.partial_axes - pair;
      if (state.partial_axes.contains(x)) s.after.partial_axes.insert(y);
      if (state.partial_axes.contains(y)) s.after.partial_axes.insert(x);
      visit(s);
    }
}

// all_to_all_v: straight to the target less its partial axes, moving
// exactly what each rank needs and does not hold. Generated last: on equal
// cost the structured collectives win.
template <class Visit>
constexpr void all_to_all_v_step(step_context const& c, Visit&& visit) {
  auto const& [mesh, state, target, all, free] = c;
  if (state.partial_axes.empty()) {
    plan_step s = c.make(step_kind::all_to_all_v, all);
    s.after = target;
    s.after.partial_axes = {};
    s.after.op = reduce_op::sum;
    if (!(s.after == state)) visit(s);
  }
}

// Calls visit(step) for every step that applies to `state` on the way to
// `target`, kind by kind in this order (on equal cost the first found
// wins). A step's `after` is always a valid layout.
template <class Visit>
constexpr void for_each_step(mesh_shape const& mesh, bound_layout const& state, bound_layout const& target,
                             Visit&& visit) {
  axis_set const all = axis_set::all(mesh.ndim);
  axis_set trivial;  // axes of extent 1: normalized() drops them, no step needs them
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (mesh.extent(a) == 1) trivial.insert(a);
  step_context const c{mesh, state, target, all, all - sharding_axes(state) - state.partial_axes - trivial};
  slice_steps(c, visit);
  all_gather_steps(c, visit);
  all_to_all_steps(c, visit);
  reduce_steps(c, visit);
  to_partial_steps(c, visit);
  permute_steps(c, visit);
  all_to_all_v_step(c, visit);
}

// The canonical form of a layout, so that layouts that place every element
// identically compare equal: axes of extent 1 split nothing and are dropped
// (a dimension left without axes is replicated), partial-free layouts carry
// op sum, and axis slots past a dimension's count are zero.
constexpr bound_layout normalized(mesh_shape const& mesh, bound_layout l) {
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (mesh.extent(a) == 1) l.partial_axes.erase(a);
  if (l.partial_axes.empty()) l.op = reduce_op::sum;
  for (std::size_t d = 0; d < l.rank; ++d) {
    bound_dim& dim = l.dims[d];
    unsigned char kept = 0;
    for (std::size_t i = 0; i < dim.count; ++i)
      if (mesh.extent(dim.axes[i]) != 1) dim.axes[kept++] = dim.axes[i];
    dim.count = kept;
    if (dim.count == 0) dim = bound_dim{};
    for (std::size_t i = dim.count; i < max_mesh_axes; ++i) dim.axes[i] = 0;
  }
  return l;
}

struct path_cost {
  std::uint64_t total = 0;
  std::uint64_t peak = 0;
  std::size_t steps = 0;
  constexpr auto operator<=>(path_cost const&) const = default;
};

struct search_node {
  bound_layout state;
  path_cost cost;
  std::size_t parent = npos;
  plan_step step;  // the step from parent to here
  bool done = false;
};

// Node indices by state, open addressing.
class state_table {
 public:
  constexpr std::size_t find(std::vector<search_node> const& nodes, bound_layout const& s) const {
    for (std::size_t i = hash(s) & mask(); slots_[i] != npos; i = (i + 1) & mask())
      if (nodes[slots_[i]].state == s) return slots_[i];
    return npos;
  }
  constexpr void insert(std::vector<search_node> const& nodes, std::size_t node) {
    if (2 * (++count_) > slots_.size()) grow(nodes);
    place(nodes, node);
  }

 private:
  constexpr std::size_t mask() const { return slots_.size() - 1; }
  constexpr void place(std::vector<search_node> const& nodes, std::size_t node) {
    std::size_t i = hash(nodes[node].state) & mask();
    while (slots_[i] != npos) i = (i + 1) & mask();
    slots_[i] = node;
  }
  constexpr void grow(std::vector<search_node> const& nodes) {
    std::vector<std::size_t> old = std::move(slots_);
    slots_.assign(old.size() * 2, npos);
    for (std::size_t node : old)
      if (node != npos) place(nodes, node);
  }
  std::vector<std::size_t> slots_ = std::vector<std::size_t>(256, npos);
  std::size_t count_ = 0;
};

}  // namespace detail

// The cheapest plan from `from` to `to` on a mesh with static extents.
// Precondition: transition_error("...", mesh, from, to) is empty.
// Postconditions: the steps chain (steps[0].before == from, each after is the
// next before, the last after == to); no plan over the same steps is cheaper.
[[nodiscard]] constexpr redistribution_plan plan_redistribution(mesh_shape const& mesh, bound_layout const& from,
                                                                bound_layout const& to, cost_model model = {}) {
  using detail::path_cost;
  bound_layout const source = detail::normalized(mesh, from);
  bound_layout const target = detail::normalized(mesh, to);
  std::uint64_t const alpha = model.alpha_per_1024 * global_units(mesh) / 1024;

  std::vector<detail::search_node> nodes;
  detail::state_table table;
  struct entry {
    path_cost cost;
    std::size_t node;
    constexpr bool operator>(entry const& other) const {
      return cost != other.cost ? cost > other.cost : node > other.node;
    }
  };
  std::vector<entry> heap;
  auto const later = [](entry const& a, entry const& b) { return a > b; };

  nodes.push_back({source, {0, local_share(mesh, source), 0}, npos, {}, false});
  table.insert(nodes, 0);
  heap.push_back({nodes[0].cost, 0});
  std::size_t reached = npos;
  std::uint64_t bound = ~std::uint64_t{0};  // cost of the cheapest way to the target seen so far
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    entry const top = heap.back();
    heap.pop_back();
    if (nodes[top.node].done || top.cost != nodes[top.node].cost) continue;
    nodes[top.node].done = true;
    if (nodes[top.node].state == target) {
      reached = top.node;
      break;
    }
    bound_layout const here = nodes[top.node].state;
    path_cost const base = nodes[top.node].cost;
    detail::for_each_step(mesh, here, target, [&](plan_step step) {
      std::uint64_t const total = base.total + (communicates(step.kind) ? alpha : 0) + step_bytes(mesh, step);
      if (total > bound) return;  // dearer than a way to the target already known
      step.after = detail::normalized(mesh, step.after);
      path_cost const cost{total, std::max(base.peak, local_share(mesh, step.after)), base.steps + 1};
      if (step.after == target) bound = std::min(bound, total);
      std::size_t node = table.find(nodes, step.after);
      if (node == npos) {
        nodes.push_back({step.after, cost, top.node, step, false});
        node = nodes.size() - 1;
        table.insert(nodes, node);
      } else if (nodes[node].done || !(cost < nodes[node].cost)) {
        return;
      } else {
        nodes[node].cost = cost;
        nodes[node].parent = top.node;
        nodes[node].step = step;
      }
      heap.push_back({cost, node});
      std::push_heap(heap.begin(), heap.end(), later);
    });
  }

  redistribution_plan plan;
  if (reached == npos) return plan;  // unreachable only if the precondition is broken
  plan.cost = nodes[reached].cost.total;
  plan.peak = nodes[reached].cost.peak;
  for (std::size_t n = reached; nodes[n].parent != npos; n = nodes[n].parent) ++plan.count;
  std::size_t i = plan.count;
  for (std::size_t n = reached; nodes[n].parent != npos; n = nodes[n].parent) {
    plan.steps[--i] = nodes[n].step;
    plan.bytes += step_bytes(mesh, nodes[n].step);
  }
  return plan;
}

[[nodiscard]] constexpr redistribution_plan plan_redistribution(mesh_shape const& mesh, layout const& from,
                                                                layout const& to, cost_model model = {}) {
  return plan_redistribution(mesh, bind(mesh, from), bind(mesh, to), model);
}

// The plan of a transition between constant layouts, checked and planned at
// compile time: constexpr auto p = static_plan<mesh, from, to>();
template <mesh_shape Mesh, layout From, layout To>
consteval redistribution_plan static_plan() {
  static_assert(require_valid<mesh_error("static_plan", Mesh)>());
  static_assert(check_transition<Mesh, From, To>());
  return plan_redistribution(Mesh, From, To);
}

// What a rank receives in a step, relative to its input shard (even case):
// "no bytes", "3/4 of local", "3 x local".
[[nodiscard]] constexpr fixed_text bytes_phrase(mesh_shape const& mesh, plan_step const& s) {
  std::uint64_t num = step_bytes(mesh, s);
  std::uint64_t den = global_units(mesh) / group_size(mesh, sharding_axes(s.before));
  fixed_text out;
  if (num == 0) return out << "no bytes";
  std::uint64_t a = num;
  std::uint64_t b = den;
  while (b != 0) {
    std::uint64_t const t = a % b;
    a = b;
    b = t;
  }
  num /= a;
  den /= a;
  if (den == 1) return num == 1 ? out << "all of local" : out << num << " x local";
  return out << num << "/" << den << " of local";
}

// One line per step: "S(tp),R -> R,S(tp): all_to_all(tp, dim 0->1), 3/4 of local",
// each prefixed with `tensor` (e.g. "f32[4096,4096] ") if given.
[[nodiscard]] inline std::string to_string(mesh_shape const& mesh, redistribution_plan const& plan,
                                           std::string_view tensor = "") {
  std::string out;
  for (std::size_t i = 0; i < plan.count; ++i) {
    plan_step const& s = plan[i];
    out.append(tensor)
        .append(to_string(mesh, s.before).view())
        .append(" -> ")
        .append(to_string(mesh, s.after).view())
        .append(": ")
        .append(to_string(mesh, s).view())
        .append(", ")
        .append(bytes_phrase(mesh, s).view())
        .append("\n");
  }
  return out;
}

}  // namespace shardmesh
