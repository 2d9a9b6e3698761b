#pragma once
// What one plan step needs on one rank, worked out once per mesh, step and
// global extents, and cached in the mesh: the pieces it packs, unpacks or
// copies (uploaded to the device), the counts and offsets of its collective,
// whether it can send from or receive into the shards directly, and, for
// an all-to-all on host memory, MPI datatypes that move the pieces in place
// and what an exchange through a node window needs (node_exchange.hpp).
// Repeated redistributions (a training loop) then only launch kernels and
// collectives. All of it is a function of the mesh, the rank and the key.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/algebra/hash.hpp"
#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/detail/lru_cache.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/mesh_context.hpp"
#include "shardmesh/tensor/detail/piece_datatypes.hpp"
#include "shardmesh/tensor/detail/pieces.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace shardmesh::detail {

template <class MemorySpace>
struct prepared_step {
  axis_set group_axes;                  // the axes of the collective's communicator
  device_pieces<MemorySpace> own;       // slice, all-to-all: what stays on this rank
  device_pieces<MemorySpace> sends;     // reduce-scatter: to every member; all-to-all: to the others
  device_pieces<MemorySpace> receives;  // all-gather: from every member; all-to-all: from the others
  std::vector<std::size_t> send_counts, send_offsets, recv_counts, recv_offsets;  // per group member
  bool send_in_place = false;         // the input shard is the send buffer, at send_offsets
  bool recv_in_place = false;         // the output shard is the receive buffer, at recv_offsets
  bool equal_blocks = false;          // all-gather, reduce-scatter: every member's block is as large
  std::optional<std::size_t> own_at;  // slice: the piece kept is contiguous in the input, from here
  std::size_t largest_count = 0;      // the largest count or displacement handed to MPI (elements)
  std::size_t peer = 0;               // permute: the rank this one exchanges with
  bool keeps_data = false;            // to_partial: this rank keeps the values, the others hold the identity
  // All-to-all on host memory where both sides would pack
  // (packs_both_sides): each member's piece in the input shard and in the
  // output shard (an empty type: nothing moves) for MPI_Alltoallw, and for
  // an exchange through a node window (node_exchange.hpp) where each
  // member's piece starts among the packed sends, and what comes from each
  // member on its own, packed from 0.
  std::vector<mpi_datatype> send_types, recv_types;
  std::vector<std::size_t> packed_send_offsets;
  std::vector<device_pieces<MemorySpace>> receives_from;
};

// Where each member's block starts: in the shard at the pieces' offsets
// there, when every piece is contiguous in it, or one after another.
inline std::vector<std::size_t> member_offsets(piece_set const& set, std::vector<std::size_t> const& piece_of,
                                               std::optional<std::vector<std::size_t>> const& in_shard) {
  std::vector<std::size_t> offsets(piece_of.size(), 0);
  for (std::size_t i = 0; i < piece_of.size(); ++i)
    if (piece_of[i] != npos) offsets[i] = in_shard ? (*in_shard)[piece_of[i]] : set.pieces[piece_of[i]].start;
  return offsets;
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

// Whether every piece is contiguous in the shard and they follow one
// another from offset 0 in order: then the shard itself is the packed buffer.
inline bool in_order_contiguous(piece_set const& set, bool source, tensor_index const& extents) {
  auto const at = contiguous_offsets(set, source, extents);
  if (!at) return false;
  for (std::size_t i = 0; i < set.pieces.size(); ++i)
    if (set.pieces[i].count != 0 && (*at)[i] != set.pieces[i].start) return false;
  return true;
}

// What rank `me` exchanges in an all-to-all step: each other member of its
// group takes from it what that member needs and it holds (sends), and
// gives it likewise (receives); per member, its piece (npos: none) and count.
struct exchange {
  piece_set sends, receives;
  std::vector<std::size_t> send_piece, recv_piece, send_counts, recv_counts;
};

inline exchange exchange_of(mesh_shape const& shape, plan_step const& s, tensor_index const& global, std::size_t me) {
  std::size_t const n = group_size(shape, s.axes);
  exchange e{{},
             {},
             std::vector<std::size_t>(n, npos),
             std::vector<std::size_t>(n, npos),
             std::vector<std::size_t>(n, 0),
             std::vector<std::size_t>(n, 0)};
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t const q = group_member(shape, s.axes, me, i);
    if (q == me) continue;
    if (holds_for(shape, s.before, me, q)) {
      e.send_piece[i] = e.sends.pieces.size();
      e.send_counts[i] = e.sends.add(shape, s.before, me, s.after, q, global);
    }
    if (holds_for(shape, s.before, q, me)) {
      e.recv_piece[i] = e.receives.pieces.size();
      e.recv_counts[i] = e.receives.add(shape, s.before, q, s.after, me, global);
    }
  }
  return e;
}

// Whether an all-to-all step packs on both sides, judged on rank 0 so that
// every rank answers alike (all must call the same collective). There, on
// host memory, MPI's datatypes move the pieces between the shards and save
// both copies (strided pencil transposes: 1.5x faster). Where one side lies
// in place, datatypes lost at 64 KiB (1.15-1.5x the hand-written transfer)
// and on a 2x2 mesh, though they won at 1 MiB on 1-D meshes: the other
// side packs with the kernel for MPI_Alltoallv there.
inline bool packs_both_sides(mesh_shape const& shape, plan_step const& s, tensor_index const& global) {
  exchange const e = exchange_of(shape, s, global, 0);
  return !contiguous_offsets(e.sends, true, local_extents(shape, s.before, global, 0)) &&
         !contiguous_offsets(e.receives, false, local_extents(shape, s.after, global, 0));
}

// Uploads the pieces on exec; datatypes are of elements of element_bytes.
template <class MemorySpace, class ExecutionSpace>
prepared_step<MemorySpace> prepare(mesh_shape const& shape, std::size_t me, plan_step const& s,
                                   tensor_index const& global, std::size_t element_bytes, ExecutionSpace const& exec) {
  prepared_step<MemorySpace> p;
  p.group_axes = s.axes;
  tensor_index const in_extents = local_extents(shape, s.before, global, me);
  tensor_index const out_extents = local_extents(shape, s.after, global, me);
  std::size_t const in_size = local_size(shape, s.before, global, me);
  std::size_t const out_size = local_size(shape, s.after, global, me);
  std::size_t const n = group_size(shape, s.axes);
  auto const member = [&](std::size_t i) { return group_member(shape, s.axes, me, i); };
  switch (s.kind) {
    case step_kind::slice: {
      piece_set own;
      own.add(shape, s.before, me, s.after, me, global);
      p.own_at = own.contiguous(0, true, in_extents);
      p.own = device_pieces<MemorySpace>(own, exec);
      break;
    }
    case step_kind::to_partial: p.keeps_data = group_position(shape, s.axes, me) == 0; break;
    case step_kind::all_reduce: break;
    case step_kind::permute: p.peer = permutation_source(shape, s.axes, me); break;
    case step_kind::all_gather: {
      // Every member sends its whole shard; each lands in a box of ours.
      piece_set from_members;
      for (std::size_t i = 0; i < n; ++i)
        p.recv_counts.push_back(from_members.add(shape, s.before, member(i), s.after, me, global));
      p.recv_in_place = in_order_contiguous(from_members, false, out_extents);
      p.equal_blocks =
          std::all_of(p.recv_counts.begin(), p.recv_counts.end(), [&](std::size_t c) { return c == p.recv_counts[0]; });
      p.receives = device_pieces<MemorySpace>(from_members, exec);
      break;
    }
    case step_kind::reduce_scatter: {
      // Our shard holds every member's new shard; send them in member order.
      piece_set to_members;
      for (std::size_t i = 0; i < n; ++i)
        p.send_counts.push_back(to_members.add(shape, s.before, me, s.after, member(i), global));
      p.send_in_place = in_order_contiguous(to_members, true, in_extents);
      p.equal_blocks =
          std::all_of(p.send_counts.begin(), p.send_counts.end(), [&](std::size_t c) { return c == p.send_counts[0]; });
      p.sends = device_pieces<MemorySpace>(to_members, exec);
      break;
    }
    case step_kind::all_to_all:
    case step_kind::all_to_all_v: {
      // What we need from ourselves is copied locally.
      auto [sends, receives, send_piece, recv_piece, send_counts, recv_counts] = exchange_of(shape, s, global, me);
      p.send_counts = std::move(send_counts);
      p.recv_counts = std::move(recv_counts);
      piece_set own;
      std::size_t const kept = own.add(shape, s.before, me, s.after, me, global);
      auto const send_in_shard = contiguous_offsets(sends, true, in_extents);
      auto const recv_in_shard = contiguous_offsets(receives, false, out_extents);
      p.send_in_place = send_in_shard.has_value();
      p.recv_in_place = recv_in_shard.has_value();
      p.send_offsets = member_offsets(sends, send_piece, send_in_shard);
      p.recv_offsets = member_offsets(receives, recv_piece, recv_in_shard);
      if (s.kind == step_kind::all_to_all_v) p.group_axes = axis_set::all(shape.ndim);
      // Datatypes count in ints: where a shard is larger, the agreement
      // refuses the step on every rank.
      bool const counts_fit = std::max(in_size, out_size) <= std::size_t{INT_MAX};
      if (host_accessible_v<MemorySpace> && counts_fit && packs_both_sides(shape, s, global)) {
        p.send_types = member_datatypes(sends, send_piece, true, element_bytes);
        p.recv_types = member_datatypes(receives, recv_piece, false, element_bytes);
        // The piece kept moves in the same call, MPI copying it from shard
        // to shard as a hand-written MPI_Alltoallw does, not by a kernel after.
        if (kept != 0) {
          std::size_t const mine = group_position(shape, s.axes, me);
          p.send_types[mine] = piece_datatype(own, 0, true, element_bytes);
          p.recv_types[mine] = piece_datatype(own, 0, false, element_bytes);
        }
        p.packed_send_offsets = member_offsets(sends, send_piece, std::nullopt);
        p.receives_from.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
          if (recv_piece[i] == npos) continue;
          piece_set from;
          from.add(shape, s.before, member(i), s.after, me, global);
          p.receives_from[i] = device_pieces<MemorySpace>(from, exec);
        }
      }
      p.own = device_pieces<MemorySpace>(own, exec);
      p.sends = device_pieces<MemorySpace>(sends, exec);
      p.receives = device_pieces<MemorySpace>(receives, exec);
      break;
    }
  }
  // Counts and displacements never exceed a shard or a packed buffer.
  p.largest_count = std::max({in_size, out_size, p.sends.total, p.receives.total});
  return p;
}

// A mesh's prepared steps for tensors in MemorySpace (a state of the mesh).
template <class MemorySpace>
class prepared_steps {
 public:
  explicit prepared_steps(mesh_context const& context) : shape_(context.shape()), rank_(context.rank()) {}

  template <class ExecutionSpace>
  [[nodiscard]] std::shared_ptr<prepared_step<MemorySpace> const> get(plan_step const& s, tensor_index const& global,
                                                                      std::size_t element_bytes,
                                                                      ExecutionSpace const& exec) {
    return cache_.get({s, global, element_bytes},
                      [&] { return prepare<MemorySpace>(shape_, rank_, s, global, element_bytes, exec); });
  }

 private:
  struct key {
    plan_step step;
    tensor_index global;
    std::size_t element_bytes;
    bool operator==(key const&) const = default;
  };
  struct key_hash {
    std::size_t operator()(key const& k) const {
      fnv1a h;
      h.mix(hash(k.step.before))
          .mix(hash(k.step.after))
          .mix(static_cast<std::uint64_t>(k.step.kind))
          .mix(k.step.axes.bits);
      for (std::size_t extent : k.global) h.mix(extent);
      h.mix(k.element_bytes);
      return static_cast<std::size_t>(h.value);
    }
  };
  mesh_shape shape_;
  std::size_t rank_;
  lru_cache<key, prepared_step<MemorySpace>, key_hash> cache_{1024};
};

// The prepared step of s for elements of T on this rank of mesh, from the
// mesh's cache or made now (uploading on exec).
template <class T, class MemorySpace, class ExecutionSpace>
std::shared_ptr<prepared_step<MemorySpace> const> prepared(device_mesh const& mesh, plan_step const& s,
                                                           tensor_index const& global, ExecutionSpace const& exec) {
  return mesh.state<prepared_steps<MemorySpace>>().get(s, global, sizeof(T), exec);
}

}  // namespace shardmesh::detail
