#pragma once
// What a stage's redistributions communicate, from the algebra's own plans:
// each declared transition (model_description.hpp) planned by plan_redistribution
// on the stage mesh, and each communicating step's calls and the bytes a
// rank receives (plan_traffic.hpp), summed by collective. The planner's
// time model prices them with the calibrated alpha + beta x bytes; a test
// checks them against the collectives the model issues, stage by stage.
//
// Pure; no Kokkos or MPI.

#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/plan/model_description.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace shardmesh::parallel {

struct collective_traffic {
  std::size_t calls = 0;
  std::size_t bytes_received = 0;  // by the rank asked about
  std::size_t group = 1;           // ranks in the collective's group
  std::size_t bytes_held = 0;      // the rank's buffer, as hardware_model prices it (the larger side)
  axis_set axes;                   // the mesh axes of its groups
};

// By the plan's step kind (the collective it runs): the traffic of every transition of
// `transitions` in the given phase, for rank `rank` of `mesh`, with
// elements of `element_bytes` unless a transition says otherwise, reduced
// as `reduction_bytes` where that is more (16-bit floats reduce widened to
// float: comm/reduced_precision.hpp).
[[nodiscard]] inline std::map<step_kind, collective_traffic> transition_traffic(
    mesh_shape const& mesh, std::vector<transition_spec> const& transitions, bool in_backward, std::size_t rank,
    std::size_t element_bytes, std::size_t reduction_bytes = 0) {
  std::map<step_kind, collective_traffic> out;
  for (transition_spec const& t : transitions) {
    if (t.in_backward != in_backward) continue;
    tensor_index global{};
    std::copy(t.extents.begin(), t.extents.end(), global.begin());
    redistribution_plan const plan = plan_redistribution(mesh, t.from, t.to);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      plan_step const& s = plan[i];
      if (!communicates(s.kind)) continue;
      collective_traffic& c = out[s.kind];
      ++c.calls;
      bool const reduces = s.kind == step_kind::all_reduce || s.kind == step_kind::reduce_scatter;
      std::size_t const declared = t.element_bytes != 0 ? t.element_bytes : element_bytes;
      std::size_t const bytes = reduces ? std::max(declared, reduction_bytes) : declared;
      c.bytes_received += received(mesh, s, global, rank) * bytes;
      c.group = group_size(mesh, s.axes);
      c.axes = s.axes;
      c.bytes_held +=
          std::max(local_size(mesh, s.before, global, rank), local_size(mesh, s.after, global, rank)) * bytes;
    }
  }
  return out;
}

}  // namespace shardmesh::parallel
