#pragma once
// Pieces: the elements one rank's old shard gives another rank's new shard.
// Shards are Cartesian products of per-dimension index sets, so a piece is a
// box described by one list of local indices per dimension on each side.
// The lists are built on the host from the shard geometry and uploaded once
// (device_pieces); one Kokkos kernel then packs, unpacks or copies any set of
// pieces on the tensor's execution space, for block and cyclic layouts alike.
//
// The kernel walks each piece row by row (a row: every dimension but the
// last fixed), so the index lists are read once per row, not per element.
// Along a row both sides step evenly unless a block-cyclic layout breaks it,
// and the copy is then a plain strided loop. Rows are cut into segments of
// at most segment_length elements, the kernel's unit of parallel work, so
// that long rows (and vectors, which are one row) still spread over every
// thread.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/detail/streaming_copy.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <vector>

namespace shardmesh::detail {

inline constexpr std::size_t segment_length = 4096;

// One box, in the arrays a piece_set carries to the device.
struct piece {
  std::size_t start = 0;                         // offset of the piece in the packed buffer
  std::size_t count = 0;                         // elements
  std::size_t box[max_tensor_rank] = {};         // extent of the box per dimension
  std::size_t src_list[max_tensor_rank] = {};    // where each dimension's source indices start
  std::size_t dst_list[max_tensor_rank] = {};    // where each dimension's destination indices start
  std::size_t src_stride[max_tensor_rank] = {};  // row-major strides of the source shard
  std::size_t dst_stride[max_tensor_rank] = {};  // row-major strides of the destination shard
  // Along the last dimension each side's local index is first + j * step
  // when `even`; otherwise the kernel reads the index lists.
  bool even = false;
  std::size_t src_first = 0, src_step = 0, dst_first = 0, dst_step = 0;
  std::size_t first_segment = 0;  // segments of all earlier pieces
  std::size_t segments_per_row = 0;
};

// Whether list[from, from + n) is first + j * step, and those two.
inline bool progression(std::vector<std::size_t> const& list, std::size_t from, std::size_t n, std::size_t& first,
                        std::size_t& step) {
  first = list[from];
  step = n > 1 ? list[from + 1] - first : 1;
  for (std::size_t j = 2; j < n; ++j)
    if (list[from + j] != first + j * step) return false;
  return true;
}

// Pieces packed one after another, in order, with their index lists.
struct piece_set {
  std::size_t rank = 0;  // tensor rank
  std::vector<piece> pieces;
  std::vector<std::size_t> src_indices;
  std::vector<std::size_t> dst_indices;
  std::size_t total = 0;     // elements
  std::size_t segments = 0;  // segments (see transfer)

  // Appends the elements that rank `to` holds under `after` and rank `from`
  // held under `before`; returns their number.
  std::size_t add(mesh_shape const& mesh, bound_layout const& before, std::size_t from, bound_layout const& after,
                  std::size_t to, tensor_index const& global) {
    rank = before.rank;
    mesh_coordinates const c_from = coordinates_of(mesh, from);
    mesh_coordinates const c_to = coordinates_of(mesh, to);
    tensor_index const src_extents = local_extents(mesh, before, global, from);
    tensor_index const dst_extents = local_extents(mesh, after, global, to);
    piece p;
    p.start = total;
    p.count = 1;
    p.first_segment = segments;
    std::size_t src_stride = 1;
    std::size_t dst_stride = 1;
    for (std::size_t d = rank; d-- > 0;) {
      p.src_stride[d] = src_stride;
      p.dst_stride[d] = dst_stride;
      src_stride *= src_extents[d];
      dst_stride *= dst_extents[d];
    }
    for (std::size_t d = 0; d < rank; ++d) {
      p.src_list[d] = src_indices.size();
      p.dst_list[d] = dst_indices.size();
      bound_dim const& src = before.dims[d];
      bound_dim const& dst = after.dims[d];
      for (std::size_t i = 0; i < dst_extents[d]; ++i) {
        std::size_t const g = to_global(mesh, dst, global[d], c_to, i);
        dim_location const at = locate(mesh, src, global[d], g);
        if (!holds_index(src, at, c_from)) continue;
        src_indices.push_back(at.local);
        dst_indices.push_back(i);
      }
      p.box[d] = dst_indices.size() - p.dst_list[d];
      p.count *= p.box[d];
    }
    if (p.count == 0) {  // keep no index lists for empty pieces
      src_indices.resize(p.src_list[0]);
      dst_indices.resize(p.dst_list[0]);
    } else {
      std::size_t const last = rank - 1;
      std::size_t const row = p.box[last];
      bool const src_even = progression(src_indices, p.src_list[last], row, p.src_first, p.src_step);
      bool const dst_even = progression(dst_indices, p.dst_list[last], row, p.dst_first, p.dst_step);
      p.even = src_even && dst_even;
      p.segments_per_row = (row + segment_length - 1) / segment_length;
      segments += p.count / row * p.segments_per_row;
    }
    pieces.push_back(p);
    total += p.count;
    return p.count;
  }

  // If piece i is one contiguous range of the source (or destination)
  // shard, its first offset there: such a piece needs no packing.
  [[nodiscard]] std::optional<std::size_t> contiguous(std::size_t i, bool source, tensor_index const& extents) const {
    piece const& p = pieces[i];
    if (p.count == 0) return 0;
    auto const& lists = source ? src_indices : dst_indices;
    auto const list = [&](std::size_t d) { return source ? p.src_list[d] : p.dst_list[d]; };
    auto const stride = [&](std::size_t d) { return source ? p.src_stride[d] : p.dst_stride[d]; };
    // Dimensions before the first one with more than one index contribute a
    // fixed offset; after it, every dimension must be whole.
    std::size_t first = 0;
    std::size_t offset = 0;
    while (first < rank && p.box[first] == 1) {
      offset += lists[list(first)] * stride(first);
      ++first;
    }
    for (std::size_t d = first; d < rank; ++d) {
      for (std::size_t k = 1; k < p.box[d]; ++k)
        if (lists[list(d) + k] != lists[list(d)] + k) return std::nullopt;
      if (d > first && (p.box[d] != extents[d] || lists[list(d)] != 0)) return std::nullopt;
    }
    if (first < rank) offset += lists[list(first)] * stride(first);
    return offset;
  }
};

// How one side of a transfer addresses its elements: through the pieces'
// index lists (a shard) or one after another (a packed buffer).
enum class addressing { indexed, packed };

// A piece_set on the device, uploaded once and reused by every transfer.
template <class MemorySpace>
struct device_pieces {
  Kokkos::View<piece*, MemorySpace> pieces;
  Kokkos::View<std::size_t*, MemorySpace> src_indices;
  Kokkos::View<std::size_t*, MemorySpace> dst_indices;
  std::size_t rank = 0;
  std::size_t total = 0;
  std::size_t segments = 0;

  device_pieces() = default;
  // Uploads on exec, and waits for it: the set may go away afterwards.
  template <class ExecutionSpace>
  device_pieces(piece_set const& set, ExecutionSpace const& exec)
      : pieces(upload(exec, set.pieces, "shardmesh::pieces")),
        src_indices(upload(exec, set.src_indices, "shardmesh::src_indices")),
        dst_indices(upload(exec, set.dst_indices, "shardmesh::dst_indices")),
        rank(set.rank),
        total(set.total),
        segments(set.segments) {
    exec.fence("shardmesh::upload_pieces");
  }

 private:
  template <class ExecutionSpace, class V>
  static Kokkos::View<V*, MemorySpace> upload(ExecutionSpace const& exec, std::vector<V> const& host,
                                              char const* label) {
    Kokkos::View<V*, MemorySpace> view(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                                       host.size());
    Kokkos::deep_copy(exec, view,
                      Kokkos::View<V const*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(host.data(), host.size()));
    return view;
  }
};

// Copies one segment (part of a row of one piece): finds its piece and the
// offsets of its row, then hands each element copy to `loop(begin, end, f)`,
// which calls f(j) for j in [begin, end): a plain loop on the host, the
// team's vector lanes on a device.
template <class T, class MemorySpace>
struct segment_copy {
  Kokkos::View<piece const*, MemorySpace> pieces;
  Kokkos::View<std::size_t const*, MemorySpace> src_indices;
  Kokkos::View<std::size_t const*, MemorySpace> dst_indices;
  Kokkos::View<T const*, MemorySpace> src;
  Kokkos::View<T*, MemorySpace> dst;
  std::size_t last;  // the last dimension
  bool src_packed;
  bool dst_packed;
  bool streaming = false;  // on the host, rows are copied by streaming stores (detail/streaming_copy.hpp)

  template <class Loop>
  KOKKOS_FUNCTION void operator()(std::size_t segment, Loop const& loop) const {
    // The last piece whose first segment is at or before this one holds it
    // (an empty piece starts where the next one does, so it is never the last).
    std::size_t lo = 0;
    std::size_t hi = pieces.extent(0);
    while (hi - lo > 1) {
      std::size_t const mid = (lo + hi) / 2;
      if (pieces(mid).first_segment <= segment)
        lo = mid;
      else
        hi = mid;
    }
    piece const& p = pieces(lo);
    // Integer division is slow next to copying a short row: skip it where
    // rows are one segment, and for the outermost dimension.
    std::size_t const local = segment - p.first_segment;
    std::size_t const row = p.segments_per_row == 1 ? local : local / p.segments_per_row;
    std::size_t const begin = (local - row * p.segments_per_row) * segment_length;
    std::size_t const end = begin + segment_length < p.box[last] ? begin + segment_length : p.box[last];
    // Offsets of the row's first element, then its elements along the last dimension.
    std::size_t src_row = 0;
    std::size_t dst_row = 0;
    for (std::size_t d = last, k = row; d-- > 0;) {
      std::size_t const i = d == 0 ? k : k % p.box[d];
      if (d != 0) k /= p.box[d];
      src_row += src_indices(p.src_list[d] + i) * p.src_stride[d];
      dst_row += dst_indices(p.dst_list[d] + i) * p.dst_stride[d];
    }
    std::size_t const packed_row = p.start + row * p.box[last];
    if (src_packed) src_row = packed_row;
    if (dst_packed) dst_row = packed_row;
    std::size_t const src_first = src_packed ? 0 : p.src_first;
    std::size_t const src_step = src_packed ? 1 : p.src_step;
    std::size_t const dst_first = dst_packed ? 0 : p.dst_first;
    std::size_t const dst_step = dst_packed ? 1 : p.dst_step;
    // Raw pointers to the row: through the Views, every store could alias
    // the View handles and the compiler would reload them per element.
    T const* const from = src.data() + src_row;
    T* const to = dst.data() + dst_row;
    if (src_step == 1 && dst_step == 1 && (p.even || (src_packed && dst_packed))) {  // the common case
      T const* const s = from + src_first;
      T* const t = to + dst_first;
      KOKKOS_IF_ON_HOST((if (streaming) {
        stream_copy(t + begin, s + begin, (end - begin) * sizeof(T));
        return;
      }))
      loop(begin, end, [&](std::size_t j) { t[j] = s[j]; });
    } else if (p.even || (src_packed && dst_packed)) {
      loop(begin, end, [&](std::size_t j) { to[dst_first + j * dst_step] = from[src_first + j * src_step]; });
    } else {
      std::size_t const* const src_list = src_indices.data() + p.src_list[last];
      std::size_t const* const dst_list = dst_indices.data() + p.dst_list[last];
      loop(begin, end, [&](std::size_t j) { to[dst_packed ? j : dst_list[j]] = from[src_packed ? j : src_list[j]]; });
    }
  }
};

// A segment's element copies one after another, on one thread.
struct serial_loop {
  template <class F>
  KOKKOS_FUNCTION void operator()(std::size_t begin, std::size_t end, F const& f) const {
    for (std::size_t j = begin; j < end; ++j) f(j);
  }
};

// Copies every element of the pieces from src to dst on ExecutionSpace, one
// segment per iteration of a range: a plain loop, for host spaces, where a
// team per segment costs more than copying a short row.
template <class ExecutionSpace, class T, class MemorySpace>
void transfer_in_ranges(ExecutionSpace const& exec, segment_copy<T, MemorySpace> const& copy, std::size_t segments) {
  Kokkos::parallel_for(
      "shardmesh::transfer_pieces",
      Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::size_t>>(exec, 0, segments),
      KOKKOS_LAMBDA(std::size_t segment) { copy(segment, serial_loop{}); });
}

// The same with streaming stores, for host spaces alone (a host lambda;
// detail/streaming_copy.hpp): a few chunks of segments per thread, each
// ended by the fence that orders its stores, so that the fences are rare.
template <class ExecutionSpace, class T, class MemorySpace>
void transfer_streaming(ExecutionSpace const& exec, segment_copy<T, MemorySpace> copy, std::size_t segments) {
  static_assert(std::is_same_v<typename ExecutionSpace::memory_space, Kokkos::HostSpace>);
  copy.streaming = true;
  std::size_t const chunks = std::min<std::size_t>(segments, 4 * static_cast<std::size_t>(exec.concurrency()));
  Kokkos::parallel_for(
      "shardmesh::transfer_pieces_streaming",
      Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::size_t>>(exec, 0, chunks), [=](std::size_t chunk) {
        for (std::size_t segment = chunk * segments / chunks; segment < (chunk + 1) * segments / chunks; ++segment)
          copy(segment, serial_loop{});
        stream_fence();
      });
}

// The same with a team per segment, its elements over the team's vector
// lanes: for devices.
template <class ExecutionSpace, class T, class MemorySpace>
void transfer_in_teams(ExecutionSpace const& exec, segment_copy<T, MemorySpace> const& copy, std::size_t segments) {
  using team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  Kokkos::parallel_for(
      "shardmesh::transfer_pieces", Kokkos::TeamPolicy<ExecutionSpace>(exec, static_cast<int>(segments), Kokkos::AUTO),
      KOKKOS_LAMBDA(team const& member) {
        copy(static_cast<std::size_t>(member.league_rank()), [&](std::size_t begin, std::size_t end, auto const& f) {
          Kokkos::parallel_for(Kokkos::TeamVectorRange(member, begin, end), f);
        });
      });
}

// How a host transfer stores: through the cache, or streaming past it
// (for destinations larger than the cache; devices store as they do).
enum class stores { cached, streaming };

// Copies every element of the pieces from src to dst on the instance exec
// (asynchronously, where the backend is).
template <class ExecutionSpace, class T, class MemorySpace>
void transfer(ExecutionSpace const& exec, device_pieces<MemorySpace> const& set,
              Kokkos::View<T const*, MemorySpace> src, addressing src_mode, Kokkos::View<T*, MemorySpace> dst,
              addressing dst_mode, stores how = stores::cached) {
  if (set.total == 0) return;
  bool const src_packed = src_mode == addressing::packed;
  bool const dst_packed = dst_mode == addressing::packed;
  segment_copy<T, MemorySpace> const copy{set.pieces, set.src_indices, set.dst_indices, src,
                                          dst,        set.rank - 1,    src_packed,      dst_packed};
  if constexpr (std::is_same_v<typename ExecutionSpace::memory_space, Kokkos::HostSpace>) {
    if (how == stores::streaming)
      transfer_streaming(exec, copy, set.segments);
    else
      transfer_in_ranges(exec, copy, set.segments);
  } else
    transfer_in_teams(exec, copy, set.segments);
}

}  // namespace shardmesh::detail
