#pragma once
// Broadcast over a communicator: the root's buffer reaches every rank.
// Counted as the root sending the buffer to each other rank and each other
// rank receiving it once.

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/nccl.hpp"
#include "shardmesh/comm/request.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>

namespace shardmesh {

// MPI_Ibcast of `buffer` from `root` (a rank of comm): read on the root,
// written on the others. The request keeps the buffer alive until it completes.
template <class T, class Space>
[[nodiscard]] request ibroadcast(communicator const& comm, Kokkos::View<T*, Space> buffer, int root,
                                 completion when = completion::deferred, execution_space_of<Space> const& exec = {}) {
  bool const at_root = comm.rank() == root;
  std::size_t const n = buffer.extent(0);
  if constexpr (detail::nccl_memory<Space>)
    if (comm.vendor_collectives())
      return detail::nccl_broadcast(comm, buffer.data(), n, root,
                                    at_root ? n * (static_cast<std::size_t>(comm.size()) - 1) : 0, at_root ? 0 : n,
                                    when, exec);
  int const count = detail::mpi_count(n);
  return detail::post(
      comm, "broadcast", when, at_root ? n * (static_cast<std::size_t>(comm.size()) - 1) : 0, at_root ? 0 : n, buffer,
      buffer, {}, exec,
      [&](T*, T* data, MPI_Request* r) {
        detail::blocking_or_not(r, MPI_Bcast, MPI_Ibcast, data, count, mpi_type<T>(), root, comm.get());
      },
      detail::buffer_use{true, std::nullopt, std::nullopt});
}

template <class T, class Space>
void broadcast(communicator const& comm, Kokkos::View<T*, Space> buffer, int root,
               execution_space_of<Space> const& exec = {}) {
  ibroadcast(comm, buffer, root, completion::immediate, exec).wait();
}

}  // namespace shardmesh
