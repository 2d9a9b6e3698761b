#pragma once
// All-reduce over a communicator, in place or from one buffer into another.
// Bytes are counted as the bandwidth-optimal algorithm moves them: a
// reduce-scatter of the buffer in n blocks, then an all-gather of the
// reduced blocks.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/nccl.hpp"
#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/comm/request.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <optional>
#include <utility>

namespace shardmesh {

namespace detail {

inline std::size_t all_reduce_moved(communicator const& comm, std::size_t count) {
  auto const n = static_cast<std::size_t>(comm.size());
  std::size_t const own = block_part(count, n, static_cast<std::size_t>(comm.rank())).size();
  return (n - 1) * own + (count - own);
}

}  // namespace detail

// MPI_Iallreduce into recv. Precondition: send and recv have equal extents
// and do not overlap. 16-bit floats reduce in float unless `how` says per
// message (reduced_precision.hpp).
template <class T, class Space>
[[nodiscard]] request iall_reduce(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                                  reduce_op op, completion when = completion::deferred,
                                  execution_space_of<Space> const& exec = {},
                                  sixteen_bit_sum how = sixteen_bit_sum::widened) {
  if constexpr (float16_element<T>)
    if (how == sixteen_bit_sum::widened)
      return detail::widened_reduction(send, recv, exec, [&](auto wide_send, auto wide_recv) {
        return iall_reduce(comm, wide_send, wide_recv, op, when, exec);
      });
  std::size_t const moved = detail::all_reduce_moved(comm, recv.extent(0));
  if constexpr (detail::nccl_reduction<Space, T>)
    if (comm.vendor_collectives())
      return detail::nccl_all_reduce(comm, send.data(), recv.data(), recv.extent(0), op, moved, when, exec);
  int const count = detail::mpi_count(recv.extent(0));
  std::pair<MPI_Datatype, MPI_Op> const reduction = detail::reduction_of<T>(op, how);
  return detail::post(comm, "all_reduce", when, moved, moved, send, recv, {}, exec, [&](T* in, T* out, MPI_Request* r) {
    detail::blocking_or_not(r, MPI_Allreduce, MPI_Iallreduce, in, out, count, reduction.first, reduction.second,
                            comm.get());
  });
}

// MPI_Iallreduce in place: data holds this rank's contribution, then the result.
template <class T, class Space>
[[nodiscard]] request iall_reduce(communicator const& comm, Kokkos::View<T*, Space> data, reduce_op op,
                                  completion when = completion::deferred, execution_space_of<Space> const& exec = {},
                                  sixteen_bit_sum how = sixteen_bit_sum::widened) {
  if constexpr (float16_element<T>)
    if (how == sixteen_bit_sum::widened)
      return detail::widened_reduction(Kokkos::View<T*, Space>(), data, exec,
                                       [&](auto, auto wide) { return iall_reduce(comm, wide, op, when, exec); });
  std::size_t const moved = detail::all_reduce_moved(comm, data.extent(0));
  if constexpr (detail::nccl_reduction<Space, T>)
    if (comm.vendor_collectives())
      return detail::nccl_all_reduce(comm, data.data(), data.data(), data.extent(0), op, moved, when, exec);
  int const count = detail::mpi_count(data.extent(0));
  std::pair<MPI_Datatype, MPI_Op> const reduction = detail::reduction_of<T>(op, how);
  return detail::post(comm, "all_reduce", when, moved, moved, Kokkos::View<T*, Space>(), data, {}, exec,
                      [&](T*, T* inout, MPI_Request* r) {
                        detail::blocking_or_not(r, MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE, inout, count,
                                                reduction.first, reduction.second, comm.get());
                      },
                      {.in_place = true, .send_parts = std::nullopt, .recv_parts = std::nullopt});
}

template <class T, class Space>
void all_reduce(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv, reduce_op op,
                execution_space_of<Space> const& exec = {}) {
  iall_reduce(comm, send, recv, op, completion::immediate, exec).wait();
}

template <class T, class Space>
void all_reduce(communicator const& comm, Kokkos::View<T*, Space> data, reduce_op op,
                execution_space_of<Space> const& exec = {}) {
  iall_reduce(comm, data, op, completion::immediate, exec).wait();
}

// One value on the host reduced over comm: a count, a loss, a norm.
template <class T>
[[nodiscard]] T all_reduce_value(communicator const& comm, T value, reduce_op op) {
  Kokkos::View<T*, Kokkos::HostSpace> one("shardmesh::all_reduce_value", 1);
  one(0) = value;
  all_reduce(comm, one, op, Kokkos::DefaultHostExecutionSpace{});
  return one(0);
}

}  // namespace shardmesh
