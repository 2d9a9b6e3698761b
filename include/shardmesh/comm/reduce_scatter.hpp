#pragma once
// Reduce-scatter over a communicator: the ranks' buffers are combined
// element-wise with op, and rank q receives block q of the result. Bytes are
// counted as the direct algorithm moves them: each rank receives the n-1
// other contributions to its block.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/nccl.hpp"
#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/comm/request.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <utility>
#include <vector>

namespace shardmesh {

// MPI_Ireduce_scatter. Precondition: send.extent(0) == sum of counts; recv.extent(0) == counts[comm.rank()].
// 16-bit floats reduce in float unless `how` says per message (reduced_precision.hpp), here and in
// ireduce_scatter.
template <class T, class Space>
[[nodiscard]] request ireduce_scatter_v(communicator const& comm, Kokkos::View<T*, Space> send,
                                        Kokkos::View<T*, Space> recv, std::vector<std::size_t> const& counts,
                                        reduce_op op, completion when = completion::deferred,
                                        execution_space_of<Space> const& exec = {},
                                        sixteen_bit_sum how = sixteen_bit_sum::widened) {
  if constexpr (float16_element<T>)
    if (how == sixteen_bit_sum::widened)
      return detail::widened_reduction(send, recv, exec, [&](auto wide_send, auto wide_recv) {
        return ireduce_scatter_v(comm, wide_send, wide_recv, counts, op, when, exec);
      });
  if constexpr (detail::nccl_reduction<Space, T>)
    if (comm.vendor_collectives())
      return detail::nccl_reduce_scatter_v(comm, send.data(), recv.data(), counts, op, when, exec);
  auto const me = static_cast<std::size_t>(comm.rank());
  auto const mpi_counts = detail::keep(detail::mpi_counts(counts));
  std::pair<MPI_Datatype, MPI_Op> const reduction = detail::reduction_of<T>(op, how);
  return detail::post(comm, "reduce_scatter", when, detail::sum_except(counts, me), counts[me] * (counts.size() - 1),
                      send, recv, {mpi_counts}, exec, [&](T* in, T* out, MPI_Request* r) {
                        detail::blocking_or_not(r, MPI_Reduce_scatter, MPI_Ireduce_scatter, in, out, mpi_counts->data(),
                                                reduction.first, reduction.second, comm.get());
                      });
}

template <class T, class Space>
void reduce_scatter_v(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                      std::vector<std::size_t> const& counts, reduce_op op,
                      execution_space_of<Space> const& exec = {}) {
  ireduce_scatter_v(comm, send, recv, counts, op, completion::immediate, exec).wait();
}

// MPI_Ireduce_scatter_block: equal blocks, send.extent(0) == comm.size() * recv.extent(0).
template <class T, class Space>
[[nodiscard]] request ireduce_scatter(communicator const& comm, Kokkos::View<T*, Space> send,
                                      Kokkos::View<T*, Space> recv, reduce_op op,
                                      completion when = completion::deferred,
                                      execution_space_of<Space> const& exec = {},
                                      sixteen_bit_sum how = sixteen_bit_sum::widened) {
  if constexpr (float16_element<T>)
    if (how == sixteen_bit_sum::widened)
      return detail::widened_reduction(send, recv, exec, [&](auto wide_send, auto wide_recv) {
        return ireduce_scatter(comm, wide_send, wide_recv, op, when, exec);
      });
  if constexpr (detail::nccl_reduction<Space, T>)
    if (comm.vendor_collectives())
      return detail::nccl_reduce_scatter_v(
          comm, send.data(), recv.data(),
          std::vector<std::size_t>(static_cast<std::size_t>(comm.size()), recv.extent(0)), op, when, exec);
  std::size_t const moved = recv.extent(0) * (static_cast<std::size_t>(comm.size()) - 1);
  int const count = detail::mpi_count(recv.extent(0));
  std::pair<MPI_Datatype, MPI_Op> const reduction = detail::reduction_of<T>(op, how);
  return detail::post(comm, "reduce_scatter", when, moved, moved, send, recv, {}, exec,
                      [&](T* in, T* out, MPI_Request* r) {
                        detail::blocking_or_not(r, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, in, out, count,
                                                reduction.first, reduction.second, comm.get());
                      });
}

template <class T, class Space>
void reduce_scatter(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv, reduce_op op,
                    execution_space_of<Space> const& exec = {}) {
  ireduce_scatter(comm, send, recv, op, completion::immediate, exec).wait();
}

}  // namespace shardmesh
