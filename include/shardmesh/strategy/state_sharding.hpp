#pragma once
// ZeRO / FSDP state sharding as layouts. A parameter's compute layout C is
// what the layers use (replicated on "dp"); S is C with "dp" added to the
// axes of dimension 0 (nested inside any "tp" split there), so each
// data-parallel replica holds a block of every tensor-parallel shard. With
// N = dp and Psi parameters (fp32 values and gradients, Adam's m and v):
//
//   stage | stored value   | reduced gradient    | optimizer state | bytes per rank
//   0     | C              | P(dp) -> C          | C               | 16 Psi
//   1     | C              | P(dp) -> C          | S               | 8 Psi + 8 Psi/N
//   2     | C              | P(dp) -> S          | S               | 4 Psi + 12 Psi/N
//   3     | S, gathered to | P(dp) -> S          | S               | 16 Psi/N + the layers
//         | C per layer    |                     |                 |   gathered at a time
//
// Gradients accumulate unreduced (C partial on "dp") over the micro-steps;
// the reduction to the "reduced gradient" layout runs once per step. The
// optimizer moves the stored value and the gradient to the state layout
// (a local slice when they are not there already), updates its block, and
// moves the value back (an all-gather in stages 1 and 2). Every transition
// is planned by the algebra; nothing here names a collective.
//
// Pure constexpr; no Kokkos or MPI.

#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/errors.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace shardmesh::parallel {

enum class zero_stage : unsigned char { none = 0, optimizer_state = 1, gradients = 2, parameters = 3 };

// The stage numbered n (0 to 3), or invalid_option_error.
[[nodiscard]] inline zero_stage to_zero_stage(long long n) {
  if (n < 0 || n > 3)
    throw invalid_option_error("ZeRO stage " + std::to_string(n) + " does not exist: stages are 0, 1, 2 and 3");
  return static_cast<zero_stage>(n);
}

// Where one parameter's value, gradients and optimizer state live.
struct state_layouts {
  bound_layout compute;     // what the layers compute with
  bound_layout stored;      // the value between steps
  bound_layout accumulate;  // gradients while micro-steps add up: compute, partial on "dp"
  bound_layout reduced;     // gradients after the step's reduction
  bound_layout state;       // optimizer state, and where the update runs
};

// Why `compute` cannot be sharded on data-parallel axis `dp`; empty when it can.
[[nodiscard]] constexpr fixed_text state_sharding_error(mesh_shape const& mesh, bound_layout const& compute,
                                                        std::size_t dp) {
  fixed_text m;
  if (dp == npos) return m;
  if (compute.rank == 0) return m.append("state sharding: a parameter needs at least one dimension");
  for (std::size_t d = 0; d < compute.rank; ++d)
    for (std::size_t i = 0; i < compute.dims[d].count; ++i)
      if (compute.dims[d].axes[i] == dp)
        return m.append("state sharding: the parameter is already sharded on \"")
            .append(mesh[dp].name.view())
            .append("\" in dimension ")
            .append(d);
  if (compute.partial_axes.contains(dp)) return m.append("state sharding: the parameter is partial on the dp axis");
  if (compute.dims[0].dist != distribution::block)
    return m.append("state sharding: dimension 0 of the parameter must be in blocks");
  if (std::size_t{compute.dims[0].count} + 1 > max_mesh_axes)
    return m.append("state sharding: dimension 0 has too many axes");
  return m;
}

// Postconditions: compute is the argument; accumulate differs from compute
// only by being partial (sum) on dp; reduced and state are compute or
// compute with dp appended to dimension 0, as the table above says; stored
// is compute below stage 3 and state at stage 3. Without a dp axis (dp ==
// npos) every layout is compute. Precondition: state_sharding_error is empty.
[[nodiscard]] constexpr state_layouts state_layouts_for(bound_layout const& compute, zero_stage stage, std::size_t dp) {
  if (dp == npos) return {compute, compute, compute, compute, compute};
  bound_layout sharded = compute;
  sharded.dims[0].axes[sharded.dims[0].count++] = static_cast<unsigned char>(dp);
  bound_layout accumulate = compute;
  accumulate.partial_axes.insert(dp);
  accumulate.op = reduce_op::sum;
  auto const pick = [&](bool shard) { return shard ? sharded : compute; };
  auto const s = static_cast<unsigned>(stage);
  return {compute, pick(s >= 3), accumulate, pick(s >= 2), pick(s >= 1)};
}

}  // namespace shardmesh::parallel
