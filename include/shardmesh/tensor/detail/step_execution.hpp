#pragma once
// Running one plan step on this rank: pack (a Kokkos kernel, skipped when
// every piece already lies contiguously in the shard), post the collective
// (non-blocking unless asked otherwise), and, once it completes, unpack
// (skipped likewise). What to pack and send comes from the prepared step.

#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/comm/all_gather.hpp"
#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/comm/all_to_all.hpp"
#include "shardmesh/comm/device_mesh.hpp"
#include "shardmesh/comm/point_to_point.hpp"
#include "shardmesh/comm/reduce_scatter.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/tensor/detail/pieces.hpp"
#include "shardmesh/tensor/detail/prepared_step.hpp"
#include "shardmesh/tensor/workspace.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace shardmesh::detail {

// A step in flight: wait for `pending`, then call `finish`.
struct step_operation {
  request pending;
  std::function<void()> finish;
};

template <class T>
KOKKOS_FUNCTION T reduction_identity(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return Kokkos::reduction_identity<T>::sum();
    case reduce_op::prod: return Kokkos::reduction_identity<T>::prod();
    case reduce_op::max: return Kokkos::reduction_identity<T>::max();
    case reduce_op::min: return Kokkos::reduction_identity<T>::min();
  }
  return T{};
}

// Starts step s: `in` is this rank's shard under s.before, `out` (allocated
// by the caller) receives its shard under s.after. With completion::immediate
// the collective has run when this returns.
template <class ExecutionSpace, class T, class MemorySpace>
step_operation start_step(device_mesh const& mesh, plan_step const& s, tensor_index const& global,
                          Kokkos::View<T*, MemorySpace> in, Kokkos::View<T*, MemorySpace> out, completion when) {
  using view = Kokkos::View<T*, MemorySpace>;
  using const_view = Kokkos::View<T const*, MemorySpace>;
  auto const p = prepared<MemorySpace>(mesh.shape(), mesh.rank(), s, global);
  auto& pool = workspace<MemorySpace>::instance();
  // Only communicating steps ask for their group (made on first use, collectively).
  auto const group = [&]() -> communicator const& { return mesh.group(p->group_axes); };
  ExecutionSpace{}.fence();  // `in` may come from a kernel still running

  switch (s.kind) {
    case step_kind::slice:
      transfer<ExecutionSpace>(p->own, const_view(in), addressing::indexed, out, addressing::indexed);
      return {};
    case step_kind::to_partial:
      if (p->keeps_data)
        Kokkos::deep_copy(ExecutionSpace{}, out, in);
      else
        Kokkos::deep_copy(ExecutionSpace{}, out, reduction_identity<T>(s.after.op));
      return {};
    case step_kind::all_reduce:
      Kokkos::deep_copy(ExecutionSpace{}, out, in);
      ExecutionSpace{}.fence();
      return {iall_reduce(group(), out, s.before.op, when), {}};
    case step_kind::permute: {
      int const peer = static_cast<int>(p->peer);
      return {iexchange(mesh.comm(), in, peer, out, peer), {}};
    }
    case step_kind::all_gather: {
      // Every member computes the same counts, so all pick the same MPI
      // call; the plain one where blocks are equal, often faster.
      auto const gather = [&](view into) {
        return p->equal_blocks ? iall_gather(group(), in, into, when) : iall_gather_v(group(), in, into, p->recv_counts, when);
      };
      if (p->recv_in_place) return {gather(out), {}};
      auto const recv = pool.acquire(p->receives.total * sizeof(T));
      view const packed = recv->template as<T>(p->receives.total);
      return {gather(packed), [p, packed, out, recv] {
                transfer<ExecutionSpace>(p->receives, const_view(packed), addressing::packed, out, addressing::indexed);
              }};
    }
    case step_kind::reduce_scatter: {
      if (p->send_in_place) return {ireduce_scatter_v(group(), in, out, p->send_counts, s.before.op, when), {}};
      auto const send = pool.acquire(p->sends.total * sizeof(T));
      view const packed = send->template as<T>(p->sends.total);
      transfer<ExecutionSpace>(p->sends, const_view(in), addressing::indexed, packed, addressing::packed);
      ExecutionSpace{}.fence();
      return {ireduce_scatter_v(group(), packed, out, p->send_counts, s.before.op, when), [send] {}};
    }
    case step_kind::all_to_all:
    case step_kind::all_to_all_v: {
      transfer<ExecutionSpace>(p->own, const_view(in), addressing::indexed, out, addressing::indexed);
      std::shared_ptr<typename workspace<MemorySpace>::lease> send_buffer, recv_buffer;
      view send = in;
      view recv = out;
      if (!p->send_in_place) {
        send_buffer = pool.acquire(p->sends.total * sizeof(T));
        send = send_buffer->template as<T>(p->sends.total);
        transfer<ExecutionSpace>(p->sends, const_view(in), addressing::indexed, send, addressing::packed);
      }
      if (!p->recv_in_place) {
        recv_buffer = pool.acquire(p->receives.total * sizeof(T));
        recv = recv_buffer->template as<T>(p->receives.total);
      }
      ExecutionSpace{}.fence();
      request pending =
          iall_to_all_v(group(), send, p->send_counts, p->send_offsets, recv, p->recv_counts, p->recv_offsets, when);
      if (p->recv_in_place) return {std::move(pending), [send_buffer] {}};
      return {std::move(pending), [p, recv, out, send_buffer, recv_buffer] {
                transfer<ExecutionSpace>(p->receives, const_view(recv), addressing::packed, out, addressing::indexed);
              }};
    }
  }
  return {};
}

}  // namespace shardmesh::detail
