#pragma once
// All-to-all over a communicator: rank p sends block q of its buffer to rank
// q and receives rank q's block p. The v form allows blocks of any size.
// Blocks a rank sends to itself are not counted as traffic.

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/mpi_types.hpp"
#include "shardmesh/comm/nccl.hpp"
#include "shardmesh/comm/request.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <utility>
#include <vector>

namespace shardmesh {

// MPI_Ialltoallv. Block q of send starts at send_displs[q] (likewise for
// recv), so pieces that already lie contiguously in a shard need no packing.
// Precondition: the blocks lie within send and recv. Staged buffers copy
// only the blocks, so what recv holds outside them (the block a rank keeps,
// copied there by the caller) survives. (The v and plain forms
// never switch on the counts: the counts differ between ranks, and every rank
// must call the same MPI collective.)
template <class T, class Space>
[[nodiscard]] request iall_to_all_v(communicator const& comm, Kokkos::View<T*, Space> send,
                                    std::vector<std::size_t> const& send_counts,
                                    std::vector<std::size_t> const& send_displs, Kokkos::View<T*, Space> recv,
                                    std::vector<std::size_t> const& recv_counts,
                                    std::vector<std::size_t> const& recv_displs, completion when = completion::deferred,
                                    execution_space_of<Space> const& exec = {}) {
  auto const me = static_cast<std::size_t>(comm.rank());
  if constexpr (detail::nccl_memory<Space>)
    if (comm.vendor_collectives()) {
      std::vector<detail::peer_block> sends, recvs;
      for (std::size_t q = 0; q < send_counts.size(); ++q) {
        sends.push_back({static_cast<int>(q), send_displs[q], send_counts[q]});
        recvs.push_back({static_cast<int>(q), recv_displs[q], recv_counts[q]});
      }
      if (send_counts[me] > 0)
        Kokkos::deep_copy(exec, Kokkos::subview(recv, std::pair(recv_displs[me], recv_displs[me] + recv_counts[me])),
                          Kokkos::subview(send, std::pair(send_displs[me], send_displs[me] + send_counts[me])));
      return detail::nccl_exchange(comm, "all_to_all", when, send.data(), sends, recv.data(), recvs, exec);
    }
  auto const scounts = detail::keep(detail::mpi_counts(send_counts));
  auto const rcounts = detail::keep(detail::mpi_counts(recv_counts));
  auto const sdispls = detail::keep(detail::mpi_counts(send_displs));
  auto const rdispls = detail::keep(detail::mpi_counts(recv_displs));
  return detail::post(comm, "all_to_all", when, detail::sum_except(send_counts, me),
                      detail::sum_except(recv_counts, me), send, recv, {scounts, rcounts, sdispls, rdispls}, exec,
                      [&](T* in, T* out, MPI_Request* r) {
                        detail::blocking_or_not(r, MPI_Alltoallv, MPI_Ialltoallv, in, scounts->data(), sdispls->data(),
                                                mpi_type<T>(), out, rcounts->data(), rdispls->data(), mpi_type<T>(),
                                                comm.get());
                      },
                      {.in_place = false,
                       .send_parts = detail::parts_of(send_counts, send_displs),
                       .recv_parts = detail::parts_of(recv_counts, recv_displs)});
}

// MPI_Ialltoallw: what goes to (comes from) member q is send_types[q]
// (recv_types[q]) placed from send's (recv's) first element, so blocks move
// straight between shards however they lie in them; MPI_DATATYPE_NULL
// where nothing moves. `sent` and `received` count elements, for the
// counters. Staged buffers are copied whole: what recv holds outside the
// blocks must be written after the exchange.
template <class T, class Space>
[[nodiscard]] request iall_to_all_w(communicator const& comm, Kokkos::View<T*, Space> send,
                                    std::vector<MPI_Datatype> const& send_types, std::size_t sent,
                                    Kokkos::View<T*, Space> recv, std::vector<MPI_Datatype> const& recv_types,
                                    std::size_t received, completion when = completion::deferred,
                                    execution_space_of<Space> const& exec = {}) {
  auto const counts = [](std::vector<MPI_Datatype> const& types) {
    std::vector<int> out;
    for (MPI_Datatype t : types) out.push_back(t == MPI_DATATYPE_NULL ? 0 : 1);
    return detail::keep(std::move(out));
  };
  auto const usable = [](std::vector<MPI_Datatype> types) {  // a count of 0 still needs a valid type
    for (MPI_Datatype& t : types)
      if (t == MPI_DATATYPE_NULL) t = MPI_BYTE;
    return detail::keep(std::move(types));
  };
  auto const scounts = counts(send_types), rcounts = counts(recv_types);
  auto const zeros = detail::keep(std::vector<int>(send_types.size(), 0));
  auto const stypes = usable(send_types), rtypes = usable(recv_types);
  return detail::post(comm, "all_to_all", when, sent, received, send, recv, {scounts, rcounts, zeros, stypes, rtypes},
                      exec, [&](T* in, T* out, MPI_Request* r) {
                        detail::blocking_or_not(r, MPI_Alltoallw, MPI_Ialltoallw, in, scounts->data(), zeros->data(),
                                                stypes->data(), out, rcounts->data(), zeros->data(), rtypes->data(),
                                                comm.get());
                      });
}

// Blocks one after another in rank order.
template <class T, class Space>
[[nodiscard]] request iall_to_all_v(communicator const& comm, Kokkos::View<T*, Space> send,
                                    std::vector<std::size_t> const& send_counts, Kokkos::View<T*, Space> recv,
                                    std::vector<std::size_t> const& recv_counts, completion when = completion::deferred,
                                    execution_space_of<Space> const& exec = {}) {
  return iall_to_all_v(comm, send, send_counts, detail::offsets(send_counts), recv, recv_counts,
                       detail::offsets(recv_counts), when, exec);
}

template <class T, class Space>
void all_to_all_v(communicator const& comm, Kokkos::View<T*, Space> send, std::vector<std::size_t> const& send_counts,
                  Kokkos::View<T*, Space> recv, std::vector<std::size_t> const& recv_counts,
                  execution_space_of<Space> const& exec = {}) {
  iall_to_all_v(comm, send, send_counts, recv, recv_counts, completion::immediate, exec).wait();
}

// MPI_Ialltoall: equal blocks of send.extent(0) / comm.size() elements.
template <class T, class Space>
[[nodiscard]] request iall_to_all(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                                  completion when = completion::deferred, execution_space_of<Space> const& exec = {}) {
  auto const n = static_cast<std::size_t>(comm.size());
  std::size_t const block = send.extent(0) / n;
  if constexpr (detail::nccl_memory<Space>)
    if (comm.vendor_collectives()) {
      std::vector<std::size_t> const counts(n, block);
      return iall_to_all_v(comm, send, counts, recv, counts, when, exec);
    }
  int const count = detail::mpi_count(block);
  return detail::post(comm, "all_to_all", when, block * (n - 1), block * (n - 1), send, recv, {}, exec,
                      [&](T* in, T* out, MPI_Request* r) {
                        detail::blocking_or_not(r, MPI_Alltoall, MPI_Ialltoall, in, count, mpi_type<T>(), out, count,
                                                mpi_type<T>(), comm.get());
                      });
}

template <class T, class Space>
void all_to_all(communicator const& comm, Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv,
                execution_space_of<Space> const& exec = {}) {
  iall_to_all(comm, send, recv, completion::immediate, exec).wait();
}

}  // namespace shardmesh
