#pragma once
// Point-to-point exchange: send a buffer to one rank and receive one from
// another, as a permutation of pieces among ranks needs. A rank that is its
// own peer copies locally and moves no bytes. And the one-way halves, isend
// and irecv, for transfers whose two ends run at different times (a
// pipeline's activations between stages).

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/nccl.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/comm/staging.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>
#include <Kokkos_Profiling_ScopedRegion.hpp>

#include <optional>

namespace shardmesh {

namespace detail {

// The non-blocking send and receive of iexchange between two other ranks,
// not counted: for algorithms made of exchanges that count themselves.
template <class T, class Space>
[[nodiscard]] request post_exchange(communicator const& comm, Kokkos::View<T*, Space> send, int destination,
                                    Kokkos::View<T*, Space> recv, int source, int tag,
                                    execution_space_of<Space> const& exec) {
  staged_buffer<T, Space> const in = stage(comm, send, std::nullopt, true, false);
  staged_buffer<T, Space> const out = stage(comm, recv, std::nullopt, false, true);
  in.to_mpi(exec);
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Irecv(out.data(), mpi_count(recv.extent(0)), mpi_type<T>(), source, tag, comm.get(), &r[0]);
  MPI_Isend(in.data(), mpi_count(send.extent(0)), mpi_type<T>(), destination, tag, comm.get(), &r[1]);
  return request("point_to_point", {r[0], r[1]}, [in, out, exec] { out.from_mpi(exec); });
}

}  // namespace detail

template <class T, class Space>
[[nodiscard]] request iexchange(communicator const& comm, Kokkos::View<T*, Space> send, int destination,
                                Kokkos::View<T*, Space> recv, int source, int tag = 0,
                                execution_space_of<Space> const& exec = {}) {
  Kokkos::Profiling::ScopedRegion region("shardmesh::point_to_point");
  int const me = comm.rank();
  if (destination == me && source == me) {
    detail::count_call<T>(comm, "point_to_point", 0, 0);
    Kokkos::deep_copy(exec, recv, send);
    exec.fence("shardmesh::point_to_point");
    return {};
  }
  if constexpr (detail::nccl_memory<Space>)
    if (comm.vendor_collectives()) {  // NCCL matches messages by order, not by tag
      if (source == me) Kokkos::deep_copy(exec, recv, send);
      return detail::nccl_exchange(comm, "point_to_point", completion::deferred, send.data(),
                                   {{destination, 0, send.extent(0)}}, recv.data(), {{source, 0, recv.extent(0)}},
                                   exec);
    }
  detail::count_call<T>(comm, "point_to_point", destination == me ? 0 : send.extent(0),
                        source == me ? 0 : recv.extent(0));
  return detail::post_exchange(comm, send, destination, recv, source, tag, exec);
}

// Non-blocking send of `data` to `destination`: keep `data` unchanged until
// the request completes.
template <class T, class Space>
[[nodiscard]] request isend(communicator const& comm, Kokkos::View<T*, Space> data, int destination, int tag = 0,
                            execution_space_of<Space> const& exec = {}) {
  staged_buffer<T, Space> const in = detail::stage(comm, data, std::nullopt, true, false);
  in.to_mpi(exec);
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Isend(in.data(), detail::mpi_count(data.extent(0)), mpi_type<T>(), destination, tag, comm.get(), &r);
  detail::count_call<T>(comm, "point_to_point", data.extent(0), 0);  // once posted: the peer may be waiting
  if (!in.staged()) return request("send", {r});
  return request("send", {r}, [in] {});  // keeps the host copy until MPI has sent it
}

// Non-blocking receive into `data` from `source`: its values are there when the request completes.
template <class T, class Space>
[[nodiscard]] request irecv(communicator const& comm, Kokkos::View<T*, Space> data, int source, int tag = 0,
                            execution_space_of<Space> const& exec = {}) {
  detail::count_call<T>(comm, "point_to_point", 0, data.extent(0));
  staged_buffer<T, Space> const out = detail::stage(comm, data, std::nullopt, false, true);
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Irecv(out.data(), detail::mpi_count(data.extent(0)), mpi_type<T>(), source, tag, comm.get(), &r);
  if (!out.staged()) return request("receive", {r});
  return request("receive", {r}, [out, exec] { out.from_mpi(exec); });
}

template <class T, class Space>
void exchange(communicator const& comm, Kokkos::View<T*, Space> send, int destination, Kokkos::View<T*, Space> recv,
              int source, int tag = 0, execution_space_of<Space> const& exec = {}) {
  iexchange(comm, send, destination, recv, source, tag, exec).wait();
}

}  // namespace shardmesh
