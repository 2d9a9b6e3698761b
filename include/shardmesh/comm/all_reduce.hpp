#pragma once
// All-reduce over a communicator, in place. Bytes are counted as the
// bandwidth-optimal algorithm moves them: a reduce-scatter of the buffer in
// n blocks, then an all-gather of the reduced blocks.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/request.hpp"

#include <Kokkos_Core.hpp>
#include <mpi.h>

#include <cstddef>

namespace shardmesh {

template <class T, class Space>
[[nodiscard]] request iall_reduce(communicator const& comm, Kokkos::View<T*, Space> data, reduce_op op,
                                  completion when = completion::deferred) {
  auto const n = static_cast<std::size_t>(comm.size());
  std::size_t const own = block_part(data.extent(0), n, static_cast<std::size_t>(comm.rank())).size();
  std::size_t const moved = (n - 1) * own + (data.extent(0) - own);
  int const count = detail::mpi_count(data.extent(0));
  return detail::post(
      "all_reduce", when, moved, moved, Kokkos::View<T*, Space>(), data, {},
      [&](T*, T* inout, MPI_Request* r) {
        detail::blocking_or_not(r, MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE, inout, count, mpi_type<T>(),
                                mpi_op(op), comm.get());
      },
      true);
}

template <class T, class Space>
void all_reduce(communicator const& comm, Kokkos::View<T*, Space> data, reduce_op op) {
  iall_reduce(comm, data, op, completion::immediate).wait();
}

}  // namespace shardmesh
