#include "plan_crossings.hpp"

#include <shardmesh/plan/communication_model.hpp>
#include <shardmesh/plan/data_parallel_collectives.hpp>
#include <shardmesh/plan/hardware_model.hpp>

#include <cmath>
#include <set>

namespace planner_tool {

using namespace shardmesh;
using namespace shardmesh::parallel;

namespace {

std::string axes_text(mesh_shape const& mesh, axis_set axes) {
  std::string out;
  for (std::size_t a = 0; a < mesh.ndim; ++a)
    if (axes.contains(a)) out += (out.empty() ? "" : ",") + std::string(mesh[a].name.view());
  return out;
}

std::string layout_text(mesh_shape const& mesh, bound_layout const& l) {
  return std::string(to_string(unbind(mesh, l)).view());
}

std::string_view phase_of(bool in_backward) { return in_backward ? "backward" : "forward"; }

// The model stages that end a pipeline chunk and send its output to the next chunk (all but the last chunk's).
std::set<std::size_t> chunk_ends(memory_model const& memory, training_plan const& plan) {
  std::set<std::size_t> ends;
  for (std::size_t s = 0; s < plan.pp; ++s) {
    auto const chunks = memory.held_stages(plan, s);
    for (std::size_t c = 0; c < chunks.size(); ++c)
      if (!chunks[c].empty() && !(s + 1 == plan.pp && c + 1 == chunks.size())) ends.insert(chunks[c].back());
  }
  return ends;
}

}  // namespace

std::vector<crossing> crossings_of(memory_model const& memory, training_plan const& plan) {
  mesh_shape const mesh = memory_model::stage_mesh(plan);
  std::vector<stage_description> const& stages = memory.stages(plan);
  element_bytes const bytes = bytes_of(plan.compute, plan.gradients);
  std::size_t const m = plan.micro_batches;
  boundary_spec const boundary = memory.model().boundary(mesh, plan.micro_batch * plan.batch_replicas());
  std::set<std::size_t> const ends = plan.pp > 1 ? chunk_ends(memory, plan) : std::set<std::size_t>{};
  std::vector<crossing> out;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    stage_description const& st = stages[i];
    for (transition_spec const& t : st.transitions)
      for (auto const& [kind, traffic] : transition_traffic(mesh, {t}, t.in_backward, 0, bytes.value, bytes.statistic))
        out.push_back({i, t.what, std::string(phase_of(t.in_backward)), std::string(to_string(collective_of(kind))),
                       axes_text(mesh, traffic.axes), traffic.group, traffic.calls * m, traffic.bytes_held * m,
                       t.extents, layout_text(mesh, t.from), layout_text(mesh, t.to)});
    for (exchange_spec const& e : st.exchanges) {
      if (e.calls == 0) continue;
      double const moved =
          e.elements * static_cast<double>(bytes.value) + e.statistic_elements * static_cast<double>(bytes.statistic);
      out.push_back({i,
                     e.what,
                     std::string(phase_of(e.in_backward)),
                     std::string(to_string(collective_of(e.kind))),
                     e.axis,
                     mesh.extent(mesh.find(e.axis)),
                     e.calls * m,
                     static_cast<std::size_t>(std::llround(moved)) * m,
                     {},
                     "",
                     ""});
    }
    if (ends.contains(i)) {
      std::size_t const b = local_elements(mesh, boundary.placement, boundary.extents, 0) * bytes.value * m;
      std::string const l(to_string(boundary.placement).view());
      for (bool in_backward : {false, true})
        out.push_back({i, in_backward ? "boundary gradient" : "boundary activation", std::string(phase_of(in_backward)),
                       "point_to_point", "pp", 2, m, b, boundary.extents, l, l});
    }
    if (plan.dp > 1 && !st.parameters.empty()) {
      std::size_t elements = 0;
      for (parameter_spec const& p : st.parameters) elements += local_elements(mesh, p.placement, p.extents, 0);
      for (dp_collective const& c : data_parallel_collectives(plan.zero)) {
        std::size_t const calls = c.per_micro_batch() ? m : 1;
        std::size_t const each = c.what == dp_payload::gradients ? bytes.gradient : bytes.value;
        out.push_back({i,
                       std::string(to_string(c.what)),
                       std::string(to_string(c.when)),
                       std::string(to_string(c.kind)),
                       "dp",
                       plan.dp,
                       calls,
                       elements * each * calls,
                       {},
                       "",
                       ""});
      }
    }
  }
  return out;
}

}  // namespace planner_tool
