#pragma once
// The whole tensor on the host, for checking and output:
//
//   auto all = gather(x);      // on every rank (an all-gather plan, reductions included)
//   auto one = gather(x, 0);   // on rank 0 only; the others get an empty view
//
// Partial tensors are reduced first. Collective over the mesh. An
// execution-space instance may be given last: the tensor's kernels run on it.

#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/tensor/detail/pieces.hpp"
#include "shardmesh/tensor/distribute.hpp"
#include "shardmesh/tensor/dtensor.hpp"
#include "shardmesh/tensor/redistribute.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <source_location>
#include <vector>

namespace shardmesh {

template <class T, std::size_t Rank, class MemorySpace>
[[nodiscard]] Kokkos::View<typename detail::view_data<T, Rank>::type, Kokkos::LayoutRight, Kokkos::HostSpace> gather(
    dynamic_dtensor<T, Rank, MemorySpace> const& x, int root = all_ranks,
    execution_space_of<MemorySpace> const& exec = {}, std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  using host_view = Kokkos::View<typename detail::view_data<T, Rank>::type, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using host_flat = Kokkos::View<T*, Kokkos::HostSpace>;
  require_held("gather", x);
  detail::operation_scope const scope([&] { return "gather " + x.notation(); });
  device_mesh const& mesh = x.mesh();
  std::size_t const me = mesh.rank();
  detail::tensor_record mine{};
  mine.what = detail::fnv1a{}.mix(detail::hash(x.layout())).mix(static_cast<std::uint64_t>(root)).value;
  bool const at_root = static_cast<std::size_t>(root) == me;
  if (at_root) {  // the root receives every other rank's shard at once
    std::size_t total = 1;
    for (std::size_t d = 0; d < Rank; ++d) total *= x.global_extents()[d];
    mine.largest_count = total;
  }
  detail::agree(mesh, "gather", x.notation(), Rank, mine);
  if (root != all_ranks && (root < 0 || static_cast<std::size_t>(root) >= mesh.size()))
    throw invalid_root_error("gather: root " + std::to_string(root) + " is not a rank of the mesh " +
                             std::string(to_string(mesh.shape()).view()) + " (" + x.notation() + ")");
  auto out = detail::allocate<host_view>("shardmesh::gathered", x.global_extents());
  if (root == all_ranks) {
    layout whole;
    whole.rank = Rank;
    // A replicated x is copied once: redistribute would copy it first.
    bool const whole_already = shardmesh::detail::normalized(mesh.shape(), x.bound()) ==
                               shardmesh::detail::normalized(mesh.shape(), bind(mesh.shape(), whole));
    Kokkos::deep_copy(exec, out, whole_already ? x.local() : redistribute(x, whole, exec).local());
    exec.fence("shardmesh::gather");
    return out;
  }
  // Reduce partial axes; then the first rank of each replica group sends its shard.
  layout values = x.layout();
  values.partial_axes = {};
  auto const y = redistribute(x, values, exec);
  bound_layout const b = y.bound();
  axis_set const replica_axes = axis_set::all(mesh.shape().ndim) - sharding_axes(b);
  std::vector<std::size_t> counts(mesh.size());
  detail::piece_set pieces;
  for (std::size_t r = 0; r < mesh.size(); ++r)
    counts[r] = group_position(mesh.shape(), replica_axes, r) == 0
                    ? pieces.add(mesh.shape(), b, r, detail::replicated_layout(Rank), me, x.global_extents())
                    : 0;
  auto const shard = Kokkos::create_mirror_view(Kokkos::WithoutInitializing, y.local());
  Kokkos::deep_copy(exec, shard, y.local());
  exec.fence("shardmesh::gather");
  host_flat const packed("shardmesh::gather", at_root ? pieces.total : 0);
  auto const mpi_counts = detail::mpi_counts(counts);
  auto const displs = detail::displacements(counts);
  detail::check_collective(mesh.comm().get(), "gather", element_name<T>());
  {
    detail::blocked_in const waiting("gather");
    MPI_Gatherv(shard.data(), mpi_counts[me], mpi_type<T>(), packed.data(), mpi_counts.data(), displs.data(),
                mpi_type<T>(), root, mesh.comm().get());
  }
  mesh.counters().record("gather", at_root ? 0 : counts[me] * sizeof(T),
                         at_root ? detail::sum_except(counts, me) * sizeof(T) : 0);
  if (!at_root) return host_view();
  auto const host_exec = detail::host_instance(exec);
  detail::transfer(host_exec, detail::device_pieces<Kokkos::HostSpace>(pieces, host_exec),
                   Kokkos::View<T const*, Kokkos::HostSpace>(packed), detail::addressing::packed,
                   host_flat(out.data(), out.size()), detail::addressing::indexed);
  host_exec.fence("shardmesh::gather");
  return out;
}

}  // namespace shardmesh
