#pragma once
// Running one plan step on this rank: pack (a Kokkos kernel, skipped when
// every piece already lies contiguously in the shard), post the collective
// (non-blocking unless asked otherwise), and, once it completes, unpack
// (skipped likewise). What to pack and send comes from the prepared step;
// the kernels run on the caller's execution-space instance.

#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/comm/all_gather.hpp"
#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/comm/all_to_all.hpp"
#include "shardmesh/comm/point_to_point.hpp"
#include "shardmesh/comm/reduce_scatter.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/runtime/collective_tuning.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/workspace.hpp"
#include "shardmesh/tensor/detail/node_exchange.hpp"
#include "shardmesh/tensor/detail/pieces.hpp"
#include "shardmesh/tensor/detail/prepared_step.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardmesh::detail {

// A step in flight: wait for `pending`, then call `finish`.
struct step_operation {
  request pending;
  std::function<void()> finish;
};

// What the non-keeping coordinates hold after to_partial. Sum and prod
// spelled out: Kokkos has no reduction_identity for std::complex.
template <class T>
KOKKOS_FUNCTION T reduction_identity(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return T(0);
    case reduce_op::prod: return T(1);
    case reduce_op::max:
      if constexpr (float16_element<T>) return static_cast<T>(-Kokkos::Experimental::infinity_v<float>);
      if constexpr (std::is_arithmetic_v<T>) return Kokkos::reduction_identity<T>::max();
      break;
    case reduce_op::min:
      if constexpr (float16_element<T>) return static_cast<T>(Kokkos::Experimental::infinity_v<float>);
      if constexpr (std::is_arithmetic_v<T>) return Kokkos::reduction_identity<T>::min();
      break;
  }
  return T{};  // no max or min for other types: validation refuses them
}

// The pieces of `in` packed into `packed`, in order.
template <class ExecutionSpace, class T, class MemorySpace>
void pack_pieces(ExecutionSpace const& exec, device_pieces<MemorySpace> const& pieces, Kokkos::View<T*, MemorySpace> in,
                 Kokkos::View<T*, MemorySpace> packed) {
  transfer(exec, pieces, Kokkos::View<T const*, MemorySpace>(in), addressing::indexed, packed, addressing::packed);
}

// What unpacks `packed` into the pieces of `out` once the collective has filled it.
template <class ExecutionSpace, class T, class MemorySpace>
std::function<void()> unpacking(ExecutionSpace const& exec, device_pieces<MemorySpace> const& pieces,
                                Kokkos::View<T*, MemorySpace> packed, Kokkos::View<T*, MemorySpace> out) {
  return [exec, pieces, packed, out] {
    transfer(exec, pieces, Kokkos::View<T const*, MemorySpace>(packed), addressing::packed, out, addressing::indexed);
  };
}

// How a node window's algorithm stores.
[[nodiscard]] inline stores stores_of(strided_all_to_all_algorithm a) {
  return a == strided_all_to_all_algorithm::node_window_streaming ? stores::streaming : stores::cached;
}

// Where the pieces of a blocking all-to-all on host memory are strided on
// both sides and the group shares a node: whether this mesh runs it through
// a node window, measured against MPI_Alltoallw the first time its size
// comes (runtime/collective_tuning.hpp), and if so runs it. `bytes`: the
// tensor's.
template <class ExecutionSpace, class T, class MemorySpace, class Prepared>
bool ran_in_node_window(ExecutionSpace const& exec, device_mesh const& mesh, communicator const& group,
                        Prepared const& p, std::size_t bytes, Kokkos::View<T*, MemorySpace> in,
                        Kokkos::View<T*, MemorySpace> out) {
  if constexpr (std::is_same_v<MemorySpace, Kokkos::HostSpace> &&
                std::is_same_v<typename ExecutionSpace::memory_space, Kokkos::HostSpace>) {
    auto& windows = mesh.state<node_windows>();
    node_window* const window = windows.of(group, p->group_axes);
    if (window == nullptr) return false;
    std::optional<node_window> trial;  // the measurement's, on its copy of group, recorded while it lives
    ledger_entry trial_recorded;
    auto const run = [&](strided_all_to_all_algorithm a, communicator const& comm) {
      if (a == strided_all_to_all_algorithm::datatypes) {
        iall_to_all_w(comm, in, handles_of(p->send_types), p->sends.total, out, handles_of(p->recv_types),
                      p->receives.total, completion::immediate, exec)
            .wait();
        return;
      }
      if (!trial) trial.emplace(comm);
      node_all_to_all(exec, comm, *trial, *p, in, out, stores_of(a));
      if (trial_recorded.bytes() != trial->capacity())
        trial_recorded = mesh.track(memory_category::workspace, trial->capacity());
    };
    auto const chosen = mesh.state<collective_tuning>().strided_all_to_all(group, bytes, run);
    trial.reset();  // collective: every rank measured, or none did
    trial_recorded = {};
    if (chosen == strided_all_to_all_algorithm::datatypes) return false;
    node_all_to_all(exec, group, *window, *p, in, out, stores_of(chosen));
    windows.record(p->group_axes);
    return true;
  } else {
    return false;
  }
}

// An all_to_all or all_to_all_v step: the piece this rank keeps copied, the
// rest packed unless it lies in place, exchanged, and unpacked once done
// unless it was received in place. On host memory where both sides would
// pack, MPI's datatypes move the pieces between the shards instead, the
// kept piece among them, or, for a blocking step, a node window may
// (ran_in_node_window).
template <class ExecutionSpace, class T, class MemorySpace, class Prepared>
step_operation start_all_to_all(ExecutionSpace const& exec, device_mesh const& mesh, communicator const& group,
                                Prepared const& p, std::size_t bytes, Kokkos::View<T*, MemorySpace> in,
                                Kokkos::View<T*, MemorySpace> out, completion when) {
  using view = Kokkos::View<T*, MemorySpace>;
  auto const keep_own = [exec, p, in, out] {
    transfer(exec, p->own, Kokkos::View<T const*, MemorySpace>(in), addressing::indexed, out, addressing::indexed);
  };
  if (!p->send_types.empty()) {
    exec.fence("shardmesh::redistribute");
    // The window's exchange blocks: asynchronous redistributions, whose
    // test() must never wait on a peer, keep MPI's non-blocking call.
    if (when == completion::immediate && ran_in_node_window(exec, mesh, group, p, bytes, in, out)) return {};
    return {iall_to_all_w(group, in, handles_of(p->send_types), p->sends.total, out, handles_of(p->recv_types),
                          p->receives.total, when, exec),
            [] {}};
  }
  keep_own();
  auto& pool = workspace_of<MemorySpace>(mesh);
  std::shared_ptr<typename workspace<MemorySpace>::lease> send_buffer, recv_buffer;
  view send = in;
  view recv = out;
  if (!p->send_in_place) {
    send_buffer = pool.acquire(p->sends.total * sizeof(T));
    send = send_buffer->template as<T>(p->sends.total);
    pack_pieces(exec, p->sends, in, send);
  }
  if (!p->recv_in_place) {
    recv_buffer = pool.acquire(p->receives.total * sizeof(T));
    recv = recv_buffer->template as<T>(p->receives.total);
  }
  exec.fence("shardmesh::redistribute");
  request pending =
      iall_to_all_v(group, send, p->send_counts, p->send_offsets, recv, p->recv_counts, p->recv_offsets, when, exec);
  if (p->recv_in_place) return {std::move(pending), [send_buffer] {}};
  return {std::move(pending),
          [unpack = unpacking(exec, p->receives, recv, out), p, send_buffer, recv_buffer] { unpack(); }};
}

// Starts step s on the instance exec: `in` is this rank's shard under
// s.before (perhaps still being written by a kernel on exec), `out`
// (allocated by the caller) receives its shard under s.after. With
// completion::immediate the collective has run when this returns. Fences
// exec, and nothing else, before MPI reads a buffer.
template <class ExecutionSpace, class T, class MemorySpace>
step_operation start_step(ExecutionSpace const& exec, device_mesh const& mesh, plan_step const& s,
                          tensor_index const& global, Kokkos::View<T*, MemorySpace> in,
                          Kokkos::View<T*, MemorySpace> out, completion when) {
  using view = Kokkos::View<T*, MemorySpace>;
  using const_view = Kokkos::View<T const*, MemorySpace>;
  auto const p = prepared<T, MemorySpace>(mesh, s, global, exec);
  auto& pool = workspace_of<MemorySpace>(mesh);
  // Only communicating steps ask for their group (made on first use, collectively).
  auto const group = [&]() -> communicator const& { return mesh.group(p->group_axes); };
  auto const ready = [&] { exec.fence("shardmesh::redistribute"); };

  switch (s.kind) {
    case step_kind::slice:
      if (p->own_at)  // the piece kept is one block of the input
        Kokkos::deep_copy(exec, out, Kokkos::subview(in, std::pair(*p->own_at, *p->own_at + out.extent(0))));
      else
        transfer(exec, p->own, const_view(in), addressing::indexed, out, addressing::indexed);
      return {};
    case step_kind::to_partial:
      if (p->keeps_data)
        Kokkos::deep_copy(exec, out, in);
      else
        Kokkos::deep_copy(exec, out, reduction_identity<T>(s.after.op));
      return {};
    case step_kind::all_reduce: ready(); return {iall_reduce(group(), in, out, s.before.op, when, exec), {}};
    case step_kind::permute: {
      ready();
      int const peer = static_cast<int>(p->peer);
      return {iexchange(mesh.comm(), in, peer, out, peer, 0, exec), {}};
    }
    case step_kind::all_gather: {
      // Every member computes the same counts, so all pick the same MPI
      // call; the plain one where blocks are equal, often faster.
      auto const gather = [&](view into) {
        return p->equal_blocks ? iall_gather(group(), in, into, when, exec)
                               : iall_gather_v(group(), in, into, p->recv_counts, when, exec);
      };
      ready();
      if (p->recv_in_place) return {gather(out), {}};
      auto const recv = pool.acquire(p->receives.total * sizeof(T));
      view const packed = recv->template as<T>(p->receives.total);
      return {gather(packed), [unpack = unpacking(exec, p->receives, packed, out), p, recv] { unpack(); }};
    }
    case step_kind::reduce_scatter: {
      // Likewise, the block form where every member's block is equal.
      auto const scatter = [&](view from) {
        return p->equal_blocks ? ireduce_scatter(group(), from, out, s.before.op, when, exec)
                               : ireduce_scatter_v(group(), from, out, p->send_counts, s.before.op, when, exec);
      };
      if (p->send_in_place) {
        ready();
        return {scatter(in), {}};
      }
      auto const send = pool.acquire(p->sends.total * sizeof(T));
      view const packed = send->template as<T>(p->sends.total);
      pack_pieces(exec, p->sends, in, packed);
      ready();
      return {scatter(packed), [send] {}};
    }
    case step_kind::all_to_all:
    case step_kind::all_to_all_v: {
      std::size_t elements = 1;
      for (std::size_t d = 0; d < s.before.rank; ++d) elements *= global[d];
      return start_all_to_all(exec, mesh, group(), p, elements * sizeof(T), in, out, when);
    }
  }
  return {};
}

}  // namespace shardmesh::detail
