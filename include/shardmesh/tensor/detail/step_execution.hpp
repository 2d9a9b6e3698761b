#pragma once
// Running one plan step on this rank: pack (a Kokkos kernel, skipped when
// every piece already lies contiguously in the shard), post the collective
// (non-blocking), and, once it completes, unpack (skipped likewise).

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
#include "shardmesh/tensor/workspace.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
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

// Whether every piece is contiguous in the `extents`-shaped shard and they
// follow one another from offset 0 in order: then the shard itself is the
// packed buffer.
inline bool in_order_contiguous(piece_set const& set, bool source, tensor_index const& extents) {
  for (std::size_t i = 0; i < set.pieces.size(); ++i) {
    auto const at = set.contiguous(i, source, extents);
    if (!at || (set.pieces[i].count != 0 && *at != set.pieces[i].start)) return false;
  }
  return true;
}

// Each piece's offset in the shard if every piece is contiguous there.
inline std::optional<std::vector<std::size_t>> contiguous_offsets(piece_set const& set, bool source,
                                                                  tensor_index const& extents) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < set.pieces.size(); ++i) {
    auto const at = set.contiguous(i, source, extents);
    if (!at) return std::nullopt;
    out.push_back(*at);
  }
  return out;
}

// Starts step s: `in` is this rank's shard under s.before, `out` (allocated
// by the caller) receives its shard under s.after. With completion::immediate
// the collective has run when this returns.
template <class ExecutionSpace, class T, class MemorySpace>
step_operation start_step(device_mesh const& mesh, plan_step const& s, tensor_index const& global,
                          Kokkos::View<T*, MemorySpace> in, Kokkos::View<T*, MemorySpace> out, completion when) {
  using view = Kokkos::View<T*, MemorySpace>;
  using const_view = Kokkos::View<T const*, MemorySpace>;
  mesh_shape const& shape = mesh.shape();
  std::size_t const me = mesh.rank();
  tensor_index const in_extents = local_extents(shape, s.before, global, me);
  tensor_index const out_extents = local_extents(shape, s.after, global, me);
  auto& pool = workspace<MemorySpace>::instance();
  std::size_t const n = group_size(shape, s.axes);
  auto const member = [&](std::size_t i) { return group_member(shape, s.axes, me, i); };
  ExecutionSpace{}.fence();  // `in` may come from a kernel still running

  switch (s.kind) {
    case step_kind::slice: {
      piece_set own;
      own.add(shape, s.before, me, s.after, me, global);
      transfer<ExecutionSpace>(own, const_view(in), addressing::indexed, out, addressing::indexed);
      return {};
    }
    case step_kind::to_partial: {
      if (group_position(shape, s.axes, me) == 0)
        Kokkos::deep_copy(ExecutionSpace{}, out, in);
      else
        Kokkos::deep_copy(ExecutionSpace{}, out, reduction_identity<T>(s.after.op));
      return {};
    }
    case step_kind::all_reduce: {
      Kokkos::deep_copy(ExecutionSpace{}, out, in);
      ExecutionSpace{}.fence();
      return {iall_reduce(mesh.group(s.axes), out, s.before.op, when), {}};
    }
    case step_kind::permute: {
      int const peer = static_cast<int>(permutation_source(shape, s, me));
      return {iexchange(mesh.comm(), in, peer, out, peer), {}};
    }
    case step_kind::all_gather: {
      // Every member sends its whole shard; each lands in a box of ours.
      std::vector<std::size_t> counts(n);
      piece_set from_members;
      for (std::size_t i = 0; i < n; ++i)
        counts[i] = from_members.add(shape, s.before, member(i), s.after, me, global);
      ExecutionSpace{}.fence();
      // Every member computes the same counts, so all pick the same MPI
      // call; the plain one where blocks are equal, often faster.
      bool const equal = std::all_of(counts.begin(), counts.end(), [&](std::size_t c) { return c == counts[0]; });
      auto const gather = [&](view into) {
        return equal ? iall_gather(mesh.group(s.axes), in, into, when)
                     : iall_gather_v(mesh.group(s.axes), in, into, counts, when);
      };
      if (in_order_contiguous(from_members, false, out_extents)) return {gather(out), {}};
      auto const recv = pool.acquire(from_members.total * sizeof(T));
      view const packed = recv->template as<T>(from_members.total);
      return {gather(packed), [from_members, packed, out, recv] {
                transfer<ExecutionSpace>(from_members, const_view(packed), addressing::packed, out,
                                         addressing::indexed);
              }};
    }
    case step_kind::reduce_scatter: {
      // Our shard holds every member's new shard; send them in member order.
      std::vector<std::size_t> counts(n);
      piece_set to_members;
      for (std::size_t i = 0; i < n; ++i) counts[i] = to_members.add(shape, s.before, me, s.after, member(i), global);
      if (in_order_contiguous(to_members, true, in_extents)) {
        ExecutionSpace{}.fence();
        return {ireduce_scatter_v(mesh.group(s.axes), in, out, counts, s.before.op, when), {}};
      }
      auto const send = pool.acquire(to_members.total * sizeof(T));
      view const packed = send->template as<T>(to_members.total);
      transfer<ExecutionSpace>(to_members, const_view(in), addressing::indexed, packed, addressing::packed);
      ExecutionSpace{}.fence();
      return {ireduce_scatter_v(mesh.group(s.axes), packed, out, counts, s.before.op, when), [send] {}};
    }
    case step_kind::all_to_all:
    case step_kind::all_to_all_v: {
      // Each member takes from us what it needs and we hold for it; what we
      // need from ourselves is copied locally.
      piece_set sends, receives, own;
      std::vector<std::size_t> send_counts(n, 0), recv_counts(n, 0);
      std::vector<std::size_t> send_piece(n, npos), recv_piece(n, npos);  // member -> its piece
      for (std::size_t i = 0; i < n; ++i) {
        std::size_t const q = member(i);
        if (q == me) continue;
        if (holds_for(shape, s.before, me, q)) {
          send_piece[i] = sends.pieces.size();
          send_counts[i] = sends.add(shape, s.before, me, s.after, q, global);
        }
        if (holds_for(shape, s.before, q, me)) {
          recv_piece[i] = receives.pieces.size();
          recv_counts[i] = receives.add(shape, s.before, q, s.after, me, global);
        }
      }
      own.add(shape, s.before, me, s.after, me, global);
      transfer<ExecutionSpace>(own, const_view(in), addressing::indexed, out, addressing::indexed);
      // Where each member's block lies: in the shard itself when every piece
      // is contiguous there, else in the packed buffer.
      auto const per_member = [&](piece_set const& set, std::vector<std::size_t> const& piece_of,
                                  std::optional<std::vector<std::size_t>> const& in_shard) {
        std::vector<std::size_t> offsets(n, 0);
        for (std::size_t i = 0; i < n; ++i)
          if (piece_of[i] != npos) offsets[i] = in_shard ? (*in_shard)[piece_of[i]] : set.pieces[piece_of[i]].start;
        return offsets;
      };
      auto const send_in_place = contiguous_offsets(sends, true, in_extents);
      auto const recv_in_place = contiguous_offsets(receives, false, out_extents);
      std::shared_ptr<typename workspace<MemorySpace>::lease> send_buffer, recv_buffer;
      view send = in;
      view recv = out;
      if (!send_in_place) {
        send_buffer = pool.acquire(sends.total * sizeof(T));
        send = send_buffer->template as<T>(sends.total);
        transfer<ExecutionSpace>(sends, const_view(in), addressing::indexed, send, addressing::packed);
      }
      if (!recv_in_place) {
        recv_buffer = pool.acquire(receives.total * sizeof(T));
        recv = recv_buffer->template as<T>(receives.total);
      }
      ExecutionSpace{}.fence();
      unsigned const axes = s.kind == step_kind::all_to_all_v ? (1U << shape.ndim) - 1 : s.axes;
      request pending = iall_to_all_v(mesh.group(axes), send, send_counts, per_member(sends, send_piece, send_in_place),
                                      recv, recv_counts, per_member(receives, recv_piece, recv_in_place), when);
      if (recv_in_place) return {std::move(pending), [send_buffer] {}};
      return {std::move(pending), [receives, recv, out, send_buffer, recv_buffer] {
                transfer<ExecutionSpace>(receives, const_view(recv), addressing::packed, out, addressing::indexed);
              }};
    }
  }
  return {};
}

}  // namespace shardmesh::detail
