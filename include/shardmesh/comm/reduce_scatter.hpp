#pragma once
// Reduce-scatter over a communicator: the ranks' buffers are combined
// element-wise with op, and rank q receives block q of the result. Bytes are
// counted as the direct algorithm moves them: each rank receives the n-1
// other contributions to its block.

#include "shardmesh/algebra/layout.hpp"
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

// MPI_Ireduce_scatter. Precondition: send.extent(0) == sum of counts; recv.extent(0) == counts[comm.rank()].
template <class T, class Space>
[[nodiscard]] request ireduce_scatter_v(communicator const& comm, Kokkos::View<T*, Space> send,
                                        Kokkos::View<T*, Space> recv, std::vector<std::size_t> const& counts,
                                        reduce_op op) {
  Kokkos::Profiling::ScopedRegion region("shardmesh::reduce_scatter");
  auto const me = static_cast<std::size_t>(comm.rank());
  detail::count_call<T>("reduce_scatter", detail::sum_except(counts, me), counts[me] * (counts.size() - 1));
  staged_buffer<T, Space> in(send);
  staged_buffer<T, Space> out(recv);
  in.to_mpi();
  auto const mpi_counts = detail::keep(detail::mpi_counts(counts));
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Ireduce_scatter(in.data(), out.data(), mpi_counts->data(), mpi_type<T>(), mpi_op(op), comm.get(), &r);
  return request("shardmesh::reduce_scatter", {r}, [in, out, mpi_counts] { out.from_mpi(); });
}

template <class T, class Space>
void reduce_scatter_v(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                      std::vector<std::size_t> const& counts, reduce_op op) {
  ireduce_scatter_v(comm, send, recv, counts, op).wait();
}

// MPI_Ireduce_scatter_block: equal blocks, send.extent(0) == comm.size() * recv.extent(0).
template <class T, class Space>
[[nodiscard]] request ireduce_scatter(communicator const& comm, Kokkos::View<T*, Space> send,
                                      Kokkos::View<T*, Space> recv, reduce_op op) {
  Kokkos::Profiling::ScopedRegion region("shardmesh::reduce_scatter");
  auto const n = static_cast<std::size_t>(comm.size());
  detail::count_call<T>("reduce_scatter", recv.extent(0) * (n - 1), recv.extent(0) * (n - 1));
  staged_buffer<T, Space> in(send);
  staged_buffer<T, Space> out(recv);
  in.to_mpi();
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Ireduce_scatter_block(in.data(), out.data(), detail::mpi_count(recv.extent(0)), mpi_type<T>(), mpi_op(op),
                            comm.get(), &r);
  return request("shardmesh::reduce_scatter", {r}, [in, out] { out.from_mpi(); });
}

template <class T, class Space>
void reduce_scatter(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                    reduce_op op) {
  ireduce_scatter(comm, send, recv, op).wait();
}

}  // namespace shardmesh
