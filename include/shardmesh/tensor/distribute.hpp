#pragma once
// Setting up a dtensor from a whole tensor on the host, held by every rank
// or by one:
//
//   auto x = distribute<rows>(mesh, global);          // every rank holds `global`
//   auto x = distribute<rows>(mesh, global, 0);       // rank 0 does; it scatters
//
// For a partial layout, the ranks at partial coordinate 0 hold the values and
// the others the op's identity. Collective over the mesh. An execution-space
// instance may be given last: the shard is filled on it, and it is fenced
// before the call returns.

#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/tensor/detail/agreement.hpp"
#include "shardmesh/tensor/detail/pieces.hpp"
#include "shardmesh/tensor/detail/step_execution.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

namespace shardmesh {

// Root argument meaning "every rank holds (or receives) the whole tensor".
inline constexpr int all_ranks = -1;

namespace detail {

// The layout of a tensor every rank holds whole.
inline bound_layout replicated_layout(std::size_t rank) {
  bound_layout r;
  r.rank = rank;
  return r;
}

// The instance for work on host copies: exec itself if it runs on the host,
// else the host space's default instance (not the caller's device instance).
template <class ExecutionSpace>
auto host_instance(ExecutionSpace const& exec) {
  if constexpr (std::is_same_v<ExecutionSpace, Kokkos::DefaultHostExecutionSpace>)
    return exec;
  else
    return Kokkos::DefaultHostExecutionSpace{};
}

// l without its partial axes.
inline bound_layout without_partial(bound_layout l) {
  l.partial_axes = {};
  l.op = reduce_op::sum;
  return l;
}

// The root packs every rank's shard in rank order and scatters them into
// each rank's host shard.
template <class T, class GlobalView, class HostExec, class HostShard>
void scatter_shards(device_mesh const& mesh, bound_layout const& values, tensor_index const& extents,
                    GlobalView const& global, int root, HostExec const& host_exec, HostShard const& host) {
  using host_flat = Kokkos::View<T*, Kokkos::HostSpace>;
  std::size_t const me = mesh.rank();
  bool const holds_global = static_cast<std::size_t>(root) == me;
  bound_layout const whole = replicated_layout(values.rank);
  piece_set shards;
  std::vector<std::size_t> counts(mesh.size());
  for (std::size_t r = 0; r < mesh.size(); ++r)
    counts[r] = holds_global ? shards.add(mesh.shape(), whole, me, values, r, extents)
                             : local_size(mesh.shape(), values, extents, r);
  host_flat packed("shardmesh::scatter", holds_global ? shards.total : 0);
  if (holds_global)
    transfer(host_exec, device_pieces<Kokkos::HostSpace>(shards, host_exec),
             Kokkos::View<T const*, Kokkos::HostSpace>(global.data(), global.size()), addressing::indexed, packed,
             addressing::packed);
  host_exec.fence("shardmesh::distribute");
  auto const sizes = mpi_counts(counts);
  auto const displs = displacements(counts);
  check_collective(mesh.comm().get(), "scatter", element_name<T>());
  {
    blocked_in const waiting("scatter");
    MPI_Scatterv(packed.data(), sizes.data(), displs.data(), mpi_type<T>(), host.data(), sizes[me], mpi_type<T>(), root,
                 mesh.comm().get());
  }
  mesh.counters().record("scatter", holds_global ? sum_except(counts, me) * sizeof(T) : 0,
                         holds_global ? 0 : counts[me] * sizeof(T));
}

}  // namespace detail

template <class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, class GlobalView>
[[nodiscard]] dynamic_dtensor<typename GlobalView::non_const_value_type, GlobalView::rank(), MemorySpace> distribute(
    device_mesh const& mesh, layout const& l, GlobalView const& global, int root = all_ranks,
    execution_space_of<MemorySpace> const& exec = {}, std::source_location where = std::source_location::current()) {
  detail::called_from const site(where);
  using T = typename GlobalView::non_const_value_type;
  constexpr std::size_t Rank = GlobalView::rank();
  using result = dynamic_dtensor<T, Rank, MemorySpace>;
  static_assert(host_accessible_v<typename GlobalView::memory_space>,
                "distribute: the global view must be on the host");
  static_assert(std::is_same_v<typename GlobalView::array_layout, Kokkos::LayoutRight>,
                "distribute: the global view must be LayoutRight (row-major)");
  std::size_t const me = mesh.rank();
  bool const holds_global = root == all_ranks || static_cast<std::size_t>(root) == me;

  // Agree on what to do (and, if all hold it, on the extents) before anything moves.
  tensor_index extents = detail::extents_of(global);
  detail::tensor_record mine{};
  mine.what = detail::fnv1a{}.mix(detail::hash(l)).mix(sizeof(T)).mix(Rank).mix(static_cast<std::uint64_t>(root)).value;
  if (root == all_ranks)
    for (std::size_t d = 0; d < Rank; ++d) mine.global[d] = extents[d];
  if (holds_global && root != all_ranks) {  // the root scatters every other rank's shard at once
    std::size_t total = 1;
    for (std::size_t d = 0; d < Rank; ++d) total *= extents[d];
    mine.largest_count = total;
  }
  std::string const tensor =
      detail::tensor_name(element_name<T>(), Rank, extents) + " " + std::string(to_string(l).view());
  detail::operation_scope const scope([&] { return "distribute " + tensor; });
  detail::agree(mesh, "distribute", tensor, Rank, mine);
  if (root != all_ranks && (root < 0 || static_cast<std::size_t>(root) >= mesh.size()))
    throw invalid_root_error("distribute: root " + std::to_string(root) + " is not a rank of the mesh " +
                             std::string(to_string(mesh.shape()).view()) + " (" + tensor + ")");
  fixed_text m = layout_error<T>("distribute", mesh.shape(), l);
  if (m.empty() && l.rank != Rank)
    m << "distribute: layout " << to_string(l) << " has " << l.rank << " dimensions, the tensor " << Rank;
  if (!m.empty()) throw invalid_layout_error(std::string(m.view()));
  if (root != all_ranks) {
    std::vector<std::uint64_t> e(extents.begin(), extents.end());
    detail::check_collective(mesh.comm().get(), "broadcast of the extents", "u64");
    detail::blocked_in const waiting("broadcast of the extents");
    MPI_Bcast(e.data(), static_cast<int>(e.size()), MPI_UINT64_T, root, mesh.comm().get());
    for (std::size_t d = 0; d < Rank; ++d) extents[d] = e[d];
  }

  bound_layout const target = bind(mesh.shape(), l);
  bound_layout const values = detail::without_partial(target);
  bound_layout const whole = detail::replicated_layout(Rank);
  auto const host_exec = detail::host_instance(exec);
  using host_flat = Kokkos::View<T*, Kokkos::HostSpace>;
  auto local = detail::allocate<typename result::view_type>("shardmesh::shard",
                                                            local_extents(mesh.shape(), target, extents, me));
  auto host = Kokkos::create_mirror_view(Kokkos::WithoutInitializing, local);
  host_flat const host_shard(host.data(), host.size());

  if (root == all_ranks) {
    detail::piece_set mine_only;
    mine_only.add(mesh.shape(), whole, me, values, me, extents);
    detail::transfer(host_exec, detail::device_pieces<Kokkos::HostSpace>(mine_only, host_exec),
                     Kokkos::View<T const*, Kokkos::HostSpace>(global.data(), global.size()),
                     detail::addressing::indexed, host_shard, detail::addressing::indexed);
  } else {
    detail::scatter_shards<T>(mesh, values, extents, global, root, host_exec, host);
  }
  host_exec.fence("shardmesh::distribute");
  if (group_position(mesh.shape(), target.partial_axes, me) != 0)
    Kokkos::deep_copy(host_exec, host, detail::reduction_identity<T>(target.op));
  Kokkos::deep_copy(exec, local, host);
  exec.fence("shardmesh::distribute");
  return result::adopt(mesh, l, extents, local);
}

// A constant layout.
template <layout Layout, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, class GlobalView>
[[nodiscard]] dtensor<typename GlobalView::non_const_value_type, Layout, MemorySpace> distribute(
    device_mesh const& mesh, GlobalView const& global, int root = all_ranks,
    execution_space_of<MemorySpace> const& exec = {}, std::source_location where = std::source_location::current()) {
  return dtensor<typename GlobalView::non_const_value_type, Layout, MemorySpace>(
      distribute<MemorySpace>(mesh, Layout, global, root, exec, where));
}

// A constant layout on a mesh with constant axis names: the axes are checked at compile time.
template <layout Layout, class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, mesh_shape Shape,
          class GlobalView>
[[nodiscard]] dtensor<typename GlobalView::non_const_value_type, Layout, MemorySpace> distribute(
    static_mesh<Shape> const& mesh, GlobalView const& global, int root = all_ranks,
    execution_space_of<MemorySpace> const& exec = {}, std::source_location where = std::source_location::current()) {
  static_assert(check_layout<Shape, Layout, typename GlobalView::non_const_value_type>());
  return distribute<Layout, MemorySpace>(static_cast<device_mesh const&>(mesh), global, root, exec, where);
}

}  // namespace shardmesh
