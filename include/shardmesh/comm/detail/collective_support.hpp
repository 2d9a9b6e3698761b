#pragma once
// What every collective wrapper needs: MPI's int counts and displacements,
// and posting one non-blocking call (profiling region, counters, staging).

#include "shardmesh/algebra/validation.hpp"
#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/counters.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/comm/staging.hpp"
#include "shardmesh/errors.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>
#include <Kokkos_Profiling_ScopedRegion.hpp>

#include <climits>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::detail {

// Redistributions check every count on every rank before any data moves
// (agreement.hpp); this catches direct calls of the collectives, which, like
// MPI's, must be given counts that fit on every rank.
inline int mpi_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw count_overflow_error("shardmesh: " + std::to_string(n) + " elements exceed an MPI count (INT_MAX)");
  return static_cast<int>(n);
}

inline std::vector<int> mpi_counts(std::vector<std::size_t> const& counts) {
  std::vector<int> out;
  out.reserve(counts.size());
  for (std::size_t c : counts) out.push_back(mpi_count(c));
  return out;
}

// Exclusive prefix sums: where each peer's block starts when blocks lie one after another.
inline std::vector<std::size_t> offsets(std::vector<std::size_t> const& counts) {
  std::vector<std::size_t> out(counts.size(), 0);
  std::size_t offset = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    out[i] = offset;
    offset += counts[i];
  }
  return out;
}

inline std::vector<int> displacements(std::vector<std::size_t> const& counts) { return mpi_counts(offsets(counts)); }

inline std::size_t sum_except(std::vector<std::size_t> const& counts, std::size_t skip) {
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0}) - counts[skip];
}

// MPI reads the count, displacement and datatype arrays of a non-blocking
// collective until it completes: they live on the heap, owned by the request.
using kept_array = std::shared_ptr<void const>;
template <class V>
std::shared_ptr<std::vector<V> const> keep(std::vector<V> values) {
  return std::make_shared<std::vector<V> const>(std::move(values));
}

// Records a call of `name` on comm moving `sent` and `received` elements of T.
template <class T>
void count_call(communicator const& comm, char const* name, std::size_t sent, std::size_t received) {
  comm.counters().record(name, sent * sizeof(T), received * sizeof(T));
}

// Calls MPI's blocking collective when there is no request to fill, its
// non-blocking twin (same arguments, then the request) otherwise.
template <class Blocking, class NonBlocking, class... Args>
void blocking_or_not(MPI_Request* r, Blocking blocking, NonBlocking non_blocking, Args... args) {
  if (r == nullptr)
    blocking(args...);
  else
    non_blocking(args..., r);
}

// What MPI touches of a collective's buffers, which is what staging copies:
// all of send and recv unless parts are given; in_place: recv only, read and
// then written (send is unused).
struct buffer_use {
  bool in_place = false;
  std::optional<std::vector<buffer_part>> send_parts;
  std::optional<std::vector<buffer_part>> recv_parts;
};

// Block q of a v-collective's buffer: counts[q] elements at displs[q].
inline std::vector<buffer_part> parts_of(std::vector<std::size_t> const& counts,
                                         std::vector<std::size_t> const& displs) {
  std::vector<buffer_part> out;
  out.reserve(counts.size());
  for (std::size_t q = 0; q < counts.size(); ++q) out.push_back({displs[q], counts[q]});
  return out;
}

// `view` as MPI should see it under comm's staging policy, with the
// staging recorded in comm's counters: bytes copied in before MPI when MPI
// reads it, copied back after when MPI writes it.
template <class T, class Space>
staged_buffer<T, Space> stage(communicator const& comm, Kokkos::View<T*, Space> view,
                              std::optional<std::vector<buffer_part>> parts, bool read, bool written) {
  staged_buffer<T, Space> out = parts ? staged_buffer<T, Space>(view, comm.staging(), std::move(*parts))
                                      : staged_buffer<T, Space>(view, comm.staging());
  if (out.staged()) comm.counters().record_staging(read ? out.staged_bytes() : 0, written ? out.staged_bytes() : 0);
  return out;
}

// Posts one collective on comm that reads send and writes recv (or,
// in_place, reads and writes recv): counts the call, stages the buffers
// where comm's staging policy says MPI cannot read them (copies on exec),
// and returns a request that keeps `keep` (count, displacement and type arrays)
// alive and copies a staged result back. post_call(send_pointer,
// recv_pointer, &request) issues the non-blocking MPI call;
// post_call(send_pointer, recv_pointer, nullptr) the blocking one, after
// which the result is copied back at once and the request holds nothing
// (no allocation: a blocking collective's heap is only MPI's).
// Precondition: send and recv are ready (no kernel still writes them).
template <class T, class Space, class ExecutionSpace, class Post>
request post(communicator const& comm, char const* name, completion when, std::size_t sent, std::size_t received,
             Kokkos::View<T*, Space> send, Kokkos::View<T*, Space> recv, std::initializer_list<kept_array> keep,
             ExecutionSpace const& exec, Post&& post_call, buffer_use use = {}) {
  // The region's name is made only when a tool listens.
  std::optional<Kokkos::Profiling::ScopedRegion> region;
  if (Kokkos::Tools::profileLibraryLoaded()) region.emplace(std::string("shardmesh::") + name);
  check_collective(comm.get(), name, element_name<T>());
  count_call<T>(comm, name, sent, received);
  staged_buffer<T, Space> const in = use.in_place ? staged_buffer<T, Space>(send, staging_policy::never)
                                                  : stage(comm, send, std::move(use.send_parts), true, false);
  staged_buffer<T, Space> const out = stage(comm, recv, std::move(use.recv_parts), use.in_place, true);
  (use.in_place ? out : in).to_mpi(exec);
  if (when == completion::immediate) {
    {
      blocked_in const waiting(name);
      post_call(in.data(), out.data(), nullptr);
    }
    out.from_mpi(exec);
    return request(name, {});
  }
  MPI_Request r = MPI_REQUEST_NULL;
  post_call(in.data(), out.data(), &r);
  return request(name, {r}, [in, out, exec, kept = std::vector<kept_array>(keep)] { out.from_mpi(exec); });
}

}  // namespace shardmesh::detail
