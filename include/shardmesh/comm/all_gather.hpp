#pragma once
// All-gather over a communicator: every rank contributes a block and
// receives all blocks in rank order. The v form allows blocks of any size.

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/nccl.hpp"
#include "shardmesh/comm/request.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <vector>

namespace shardmesh {

// MPI_Iallgatherv. Precondition: counts[q] is rank q's block size; send.extent(0) ==
// counts[comm.rank()]; recv.extent(0) == sum of counts. The request
// keeps send and recv alive until it completes.
template <class T, class Space>
[[nodiscard]] request iall_gather_v(communicator const& comm, Kokkos::View<T*, Space> send,
                                    Kokkos::View<T*, Space> recv, std::vector<std::size_t> const& counts,
                                    completion when = completion::deferred,
                                    execution_space_of<Space> const& exec = {}) {
  auto const me = static_cast<std::size_t>(comm.rank());
  if constexpr (detail::nccl_memory<Space>)
    if (comm.vendor_collectives()) {
      std::vector<std::size_t> const at = detail::offsets(counts);
      std::vector<detail::peer_block> sends, recvs;
      for (std::size_t q = 0; q < counts.size(); ++q) {
        sends.push_back({static_cast<int>(q), 0, counts[me]});
        recvs.push_back({static_cast<int>(q), at[q], counts[q]});
      }
      Kokkos::deep_copy(exec, Kokkos::subview(recv, std::pair(at[me], at[me] + counts[me])), send);
      return detail::nccl_exchange(comm, "all_gather", when, send.data(), sends, recv.data(), recvs, exec);
    }
  auto const mpi_counts = detail::keep(detail::mpi_counts(counts));
  auto const displs = detail::keep(detail::displacements(counts));
  return detail::post(comm, "all_gather", when, counts[me] * (counts.size() - 1), detail::sum_except(counts, me), send,
                      recv, {mpi_counts, displs}, exec, [&](T* in, T* out, MPI_Request* r) {
                        detail::blocking_or_not(r, MPI_Allgatherv, MPI_Iallgatherv, in, (*mpi_counts)[me],
                                                mpi_type<T>(), out, mpi_counts->data(), displs->data(), mpi_type<T>(),
                                                comm.get());
                      });
}

template <class T, class Space>
void all_gather_v(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                  std::vector<std::size_t> const& counts, execution_space_of<Space> const& exec = {}) {
  iall_gather_v(comm, send, recv, counts, completion::immediate, exec).wait();
}

// MPI_Iallgather: equal blocks, recv.extent(0) == comm.size() * send.extent(0).
template <class T, class Space>
[[nodiscard]] request iall_gather(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                                  completion when = completion::deferred, execution_space_of<Space> const& exec = {}) {
  if constexpr (detail::nccl_memory<Space>)
    if (comm.vendor_collectives())
      return detail::nccl_all_gather(comm, send.data(), recv.data(), send.extent(0), when, exec);
  std::size_t const moved = send.extent(0) * (static_cast<std::size_t>(comm.size()) - 1);
  int const count = detail::mpi_count(send.extent(0));
  return detail::post(comm, "all_gather", when, moved, moved, send, recv, {}, exec, [&](T* in, T* out, MPI_Request* r) {
    detail::blocking_or_not(r, MPI_Allgather, MPI_Iallgather, in, count, mpi_type<T>(), out, count, mpi_type<T>(),
                            comm.get());
  });
}

template <class T, class Space>
void all_gather(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                execution_space_of<Space> const& exec = {}) {
  iall_gather(comm, send, recv, completion::immediate, exec).wait();
}

}  // namespace shardmesh
