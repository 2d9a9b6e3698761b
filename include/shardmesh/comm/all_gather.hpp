#pragma once
// All-gather over a communicator: every rank contributes a block and
// receives all blocks in rank order. The v form allows blocks of any size.

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/comm/staging.hpp"

#include <Kokkos_Core.hpp>
#include <Kokkos_Profiling_ScopedRegion.hpp>
#include <mpi.h>

#include <cstddef>
#include <vector>

namespace shardmesh {

// MPI_Iallgatherv. Precondition: counts[q] is rank q's block size; send.extent(0) ==
// counts[comm.rank()]; recv.extent(0) == sum of counts. The request
// keeps send and recv alive until it completes.
template <class T, class Space>
[[nodiscard]] request iall_gather_v(communicator const& comm, Kokkos::View<T*, Space> send,
                                    Kokkos::View<T*, Space> recv, std::vector<std::size_t> const& counts) {
  Kokkos::Profiling::ScopedRegion region("shardmesh::all_gather");
  auto const me = static_cast<std::size_t>(comm.rank());
  detail::count_call<T>("all_gather", counts[me] * (counts.size() - 1), detail::sum_except(counts, me));
  staged_buffer<T, Space> in(send);
  staged_buffer<T, Space> out(recv);
  in.to_mpi();
  auto const mpi_counts = detail::keep(detail::mpi_counts(counts));
  auto const displs = detail::keep(detail::displacements(counts));
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Iallgatherv(in.data(), (*mpi_counts)[me], mpi_type<T>(), out.data(), mpi_counts->data(), displs->data(),
                  mpi_type<T>(), comm.get(), &r);
  return request("shardmesh::all_gather", {r}, [in, out, mpi_counts, displs] { out.from_mpi(); });
}

template <class T, class Space>
void all_gather_v(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                  std::vector<std::size_t> const& counts) {
  iall_gather_v(comm, send, recv, counts).wait();
}

// MPI_Iallgather: equal blocks, recv.extent(0) == comm.size() * send.extent(0).
template <class T, class Space>
[[nodiscard]] request iall_gather(communicator const& comm, Kokkos::View<T*, Space> send,
                                  Kokkos::View<T*, Space> recv) {
  Kokkos::Profiling::ScopedRegion region("shardmesh::all_gather");
  auto const n = static_cast<std::size_t>(comm.size());
  detail::count_call<T>("all_gather", send.extent(0) * (n - 1), send.extent(0) * (n - 1));
  staged_buffer<T, Space> in(send);
  staged_buffer<T, Space> out(recv);
  in.to_mpi();
  MPI_Request r = MPI_REQUEST_NULL;
  int const count = detail::mpi_count(send.extent(0));
  MPI_Iallgather(in.data(), count, mpi_type<T>(), out.data(), count, mpi_type<T>(), comm.get(), &r);
  return request("shardmesh::all_gather", {r}, [in, out] { out.from_mpi(); });
}

template <class T, class Space>
void all_gather(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv) {
  iall_gather(comm, send, recv).wait();
}

}  // namespace shardmesh
