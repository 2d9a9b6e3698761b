#pragma once
// Collectives on device memory through NCCL, for a CUDA build that links
// it (SHARDMESH_HAS_NCCL), or through RCCL, AMD's implementation of the
// same interface, for a HIP build that links it (SHARDMESH_HAS_RCCL):
// enqueued on the stream of the execution-space instance given, without a
// host fence. Every collective
// of comm/ takes this path for device memory when its communicator asks
// for the vendor's library (communicator::set_vendor_collectives, the
// default), and MPI's otherwise:
//   all_reduce                      ncclAllReduce (in place: the same buffer)
//   reduce_scatter (equal blocks)   ncclReduceScatter
//   reduce_scatter_v                an ncclReduce to each block's rank, grouped
//   all_gather, all_gather_v,       ncclSend and ncclRecv of each block, grouped
//   all_to_all, all_to_all_v,
//   broadcast, exchange
// (all_to_all_w, which takes MPI datatypes, and tagged sends stay on MPI).
// Calls are counted as MPI's are, with the same bytes. The NCCL
// communicator of an MPI communicator is made by the first collective that
// needs it (the unique id broadcast over MPI) and destroyed with it.
// NCCL orders work by stream, not by request: a deferred collective returns
// a request that is already complete (what runs after it on the same
// instance sees its result), an immediate one fences the instance first.
// 16-bit floats reduce as MPI's path does: widened to float, reduced,
// rounded once (reduced_precision.hpp).

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/memory_kind.hpp"
#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/comm/staging.hpp"
#include "shardmesh/errors.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <vector>

#ifndef SHARDMESH_HAS_NCCL
#define SHARDMESH_HAS_NCCL 0
#endif
#ifndef SHARDMESH_HAS_RCCL
#define SHARDMESH_HAS_RCCL 0
#endif

#if SHARDMESH_HAS_NCCL && defined(KOKKOS_ENABLE_CUDA)
#define SHARDMESH_DETAIL_NCCL_API 1
#include <nccl.h>
#elif SHARDMESH_HAS_RCCL && defined(KOKKOS_ENABLE_HIP)
#define SHARDMESH_DETAIL_NCCL_API 1
#include <rccl/rccl.h>
#else
#define SHARDMESH_DETAIL_NCCL_API 0
#endif

#if SHARDMESH_DETAIL_NCCL_API
#include <mpi.h>
#include <Kokkos_Profiling_ScopedRegion.hpp>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#endif

namespace shardmesh::detail {

// A block of a buffer that moves to or from one peer.
struct peer_block {
  int peer = 0;
  std::size_t offset = 0, count = 0;
};

#if SHARDMESH_DETAIL_NCCL_API

// The build's device memory, and the stream of an instance of its execution space.
#if defined(KOKKOS_ENABLE_CUDA)
inline constexpr memory_kind nccl_device = memory_kind::cuda;
inline cudaStream_t nccl_stream(Kokkos::Cuda const& exec) { return exec.cuda_stream(); }
#else
inline constexpr memory_kind nccl_device = memory_kind::hip;
inline hipStream_t nccl_stream(Kokkos::HIP const& exec) { return exec.hip_stream(); }
#endif

// Whether collectives on data in Space may go through NCCL or RCCL (when the
// communicator asks for the vendor's library).
template <class Space>
inline constexpr bool nccl_memory = memory_kind_of<Space>() == nccl_device;

inline void check_nccl(ncclResult_t result, char const* what) {
  if (result != ncclSuccess) throw error(std::string("shardmesh: ") + what + " failed: " + ncclGetErrorString(result));
}

// comm's NCCL communicator, made on first use (collective over comm).
inline ncclComm_t nccl_comm_of(communicator const& comm) {
  std::shared_ptr<void>& held = comm.vendor_comm();
  if (!held) {
    ncclUniqueId id{};
    if (comm.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm.get());
    ncclComm_t made = nullptr;
    check_nccl(ncclCommInitRank(&made, comm.size(), id, comm.rank()), "ncclCommInitRank");
    held = std::shared_ptr<void>(made, [](void* c) { ncclCommDestroy(static_cast<ncclComm_t>(c)); });
  }
  return static_cast<ncclComm_t>(held.get());
}

// NCCL's type for T; types it does not know move as bytes (moves only).
// 16-bit floats reduce in 16 bits only when asked to (per message).
template <class T>
constexpr ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, bf16>) return ncclBfloat16;
  if constexpr (std::is_same_v<T, fp16>) return ncclFloat16;
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  if constexpr (std::is_same_v<T, int>) return ncclInt32;
  if constexpr (std::is_same_v<T, unsigned>) return ncclUint32;
  if constexpr (std::is_same_v<T, long> || std::is_same_v<T, long long>) return ncclInt64;
  if constexpr (std::is_same_v<T, unsigned long> || std::is_same_v<T, unsigned long long>) return ncclUint64;
  if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char>) return ncclInt8;
  return ncclUint8;
}
template <class T>
constexpr bool nccl_reduces = nccl_type<T>() != ncclUint8 || std::is_same_v<T, unsigned char>;
// Whether a reduction of T on data in Space may go through the vendor's library:
// the types it reduces; the others (bool, 16-bit integers) reduce through MPI.
template <class Space, class T>
inline constexpr bool nccl_reduction = nccl_memory<Space> && nccl_reduces<T>;
template <class T>
constexpr std::size_t nccl_elements(std::size_t count) {
  return nccl_type<T>() == ncclUint8 ? count * sizeof(T) : count;
}

inline ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::max: return ncclMax;
    case reduce_op::min: return ncclMin;
    case reduce_op::prod: return ncclProd;
  }
  return ncclSum;
}

// What every collective does first, on any backend: a profiling region,
// and the debug mode's agreement on the call (collective_debug.hpp).
template <class T>
Kokkos::Profiling::ScopedRegion nccl_begin(communicator const& comm, char const* name) {
  check_collective(comm.get(), name, element_name<T>());
  return Kokkos::Profiling::ScopedRegion(std::string("shardmesh::") + name);
}

// The request of a collective enqueued on exec's stream (see the top).
template <class Exec>
request nccl_request(char const* name, completion when, Exec const& exec) {
  if (when == completion::immediate) exec.fence(name);
  return request(name, {});
}

// all_gather of equal blocks.
template <class T, class Exec>
request nccl_all_gather(communicator const& comm, T const* send, T* recv, std::size_t count, completion when,
                        Exec const& exec) {
  auto const region = nccl_begin<T>(comm, "all_gather");
  check_nccl(ncclAllGather(send, recv, nccl_elements<T>(count), nccl_type<T>(), nccl_comm_of(comm), nccl_stream(exec)),
             "ncclAllGather");
  std::size_t const moved = count * (static_cast<std::size_t>(comm.size()) - 1);
  comm.counters().record("all_gather", moved * sizeof(T), moved * sizeof(T));
  return nccl_request("all_gather", when, exec);
}

// Sends and receives of blocks of send and recv, grouped.
template <class T, class Exec>
request nccl_exchange(communicator const& comm, char const* name, completion when, T const* send,
                      std::vector<peer_block> const& sends, T* recv, std::vector<peer_block> const& recvs,
                      Exec const& exec) {
  auto const region = nccl_begin<T>(comm, name);
  ncclComm_t const c = nccl_comm_of(comm);
  auto const stream = nccl_stream(exec);
  std::size_t sent = 0, received = 0;
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (peer_block const& b : sends) {
    if (b.count == 0 || b.peer == comm.rank()) continue;
    sent += b.count;
    check_nccl(ncclSend(send + b.offset, nccl_elements<T>(b.count), nccl_type<T>(), b.peer, c, stream), "ncclSend");
  }
  for (peer_block const& b : recvs) {
    if (b.count == 0 || b.peer == comm.rank()) continue;
    received += b.count;
    check_nccl(ncclRecv(recv + b.offset, nccl_elements<T>(b.count), nccl_type<T>(), b.peer, c, stream), "ncclRecv");
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  comm.counters().record(name, sent * sizeof(T), received * sizeof(T));
  return nccl_request(name, when, exec);
}

template <class T, class Exec>
request nccl_all_reduce(communicator const& comm, T const* send, T* recv, std::size_t count, reduce_op op,
                        std::size_t moved, completion when, Exec const& exec) {
  static_assert(nccl_reduces<T>, "all_reduce: NCCL reduces arithmetic types only");
  auto const region = nccl_begin<T>(comm, "all_reduce");
  check_nccl(ncclAllReduce(send, recv, count, nccl_type<T>(), nccl_op(op), nccl_comm_of(comm), nccl_stream(exec)),
             "ncclAllReduce");
  comm.counters().record("all_reduce", moved * sizeof(T), moved * sizeof(T));
  return nccl_request("all_reduce", when, exec);
}

// Block q of send (counts[q] elements, one after another) summed over the
// ranks into rank q's recv.
template <class T, class Exec>
request nccl_reduce_scatter_v(communicator const& comm, T const* send, T* recv, std::vector<std::size_t> const& counts,
                              reduce_op op, completion when, Exec const& exec) {
  static_assert(nccl_reduces<T>, "reduce_scatter: NCCL reduces arithmetic types only");
  auto const region = nccl_begin<T>(comm, "reduce_scatter");
  ncclComm_t const c = nccl_comm_of(comm);
  auto const me = static_cast<std::size_t>(comm.rank());
  bool const equal = std::all_of(counts.begin(), counts.end(), [&](std::size_t n) { return n == counts.front(); });
  if (equal) {
    check_nccl(ncclReduceScatter(send, recv, counts.front(), nccl_type<T>(), nccl_op(op), c, nccl_stream(exec)),
               "ncclReduceScatter");
  } else {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    std::size_t at = 0;
    for (std::size_t q = 0; q < counts.size(); ++q) {
      check_nccl(ncclReduce(send + at, q == me ? recv : nullptr, counts[q], nccl_type<T>(), nccl_op(op),
                            static_cast<int>(q), c, nccl_stream(exec)),
                 "ncclReduce");
      at += counts[q];
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }
  std::size_t const total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  comm.counters().record("reduce_scatter", (total - counts[me]) * sizeof(T),
                         (counts.size() - 1) * counts[me] * sizeof(T));
  return nccl_request("reduce_scatter", when, exec);
}

template <class T, class Exec>
request nccl_broadcast(communicator const& comm, T* buffer, std::size_t count, int root, std::size_t sent,
                       std::size_t received, completion when, Exec const& exec) {
  auto const region = nccl_begin<T>(comm, "broadcast");
  check_nccl(ncclBroadcast(buffer, buffer, nccl_elements<T>(count), nccl_type<T>(), root, nccl_comm_of(comm),
                           nccl_stream(exec)),
             "ncclBroadcast");
  comm.counters().record("broadcast", sent * sizeof(T), received * sizeof(T));
  return nccl_request("broadcast", when, exec);
}

#else

template <class Space>
inline constexpr bool nccl_memory = false;
template <class Space, class T>
inline constexpr bool nccl_reduction = false;

// Declared for the collectives' calls, which a build without NCCL never makes.
template <class T, class Exec>
request nccl_exchange(communicator const&, char const*, completion, T const*, std::vector<peer_block> const&, T*,
                      std::vector<peer_block> const&, Exec const&);
template <class T, class Exec>
request nccl_all_gather(communicator const&, T const*, T*, std::size_t, completion, Exec const&);
template <class T, class Exec>
request nccl_all_reduce(communicator const&, T const*, T*, std::size_t, reduce_op, std::size_t, completion,
                        Exec const&);
template <class T, class Exec>
request nccl_reduce_scatter_v(communicator const&, T const*, T*, std::vector<std::size_t> const&, reduce_op, completion,
                              Exec const&);
template <class T, class Exec>
request nccl_broadcast(communicator const&, T*, std::size_t, int, std::size_t, std::size_t, completion, Exec const&);

#endif

}  // namespace shardmesh::detail
