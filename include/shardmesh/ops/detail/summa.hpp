#pragma once
// SUMMA for C = alpha A.B of matrices (algebra/product_algorithm.hpp): the
// contracted dimension k walked in strips (all of them by every rank, or a
// share by each layer of ranks: summa_2_5d); each strip of A broadcast over
// the axes that shard A's k from the rank holding it, each strip of B over
// those of B's; every rank adds the strip's product into its block of C.
// Two strips of each operand that travels live in the mesh's workspace, so
// that the next strip's broadcasts are in flight while this one multiplies
// (or one, where the plan says a tight limit would make two too narrow);
// B's holder broadcasts its strip (whole rows) where it lies. Where the plan
// cuts strips into tiles (one operand travels), a step moves and multiplies
// one tile: the strip's rows of A, or columns of B, in that tile's range.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/product_algorithm.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/comm/broadcast.hpp"
#include "shardmesh/ops/local_gemm.hpp"
#include "shardmesh/runtime/progress.hpp"
#include "shardmesh/runtime/workspace.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <type_traits>

namespace shardmesh::ops::detail {

// A range [from, to) of an operand's other dimension (A's rows, B's columns).
struct tile_range {
  std::size_t from = 0;
  std::size_t to = 0;
  [[nodiscard]] std::size_t size() const { return to - from; }
};

// Tile t of `tiles` over `extent` indices: ceil(extent / tiles) each, the last ones shorter or empty.
[[nodiscard]] inline tile_range tile_of(std::size_t extent, std::size_t tiles, std::size_t t) {
  std::size_t const each = (extent + tiles - 1) / tiles;
  return {std::min(t * each, extent), std::min((t + 1) * each, extent)};
}

// One operand's side of the walk: where its k lies, who broadcasts each
// strip, and the two strips (or tiles) that may be in flight at once (slots 0 and 1).
template <class T, class MemorySpace>
class summa_operand {
 public:
  using strip_view = Kokkos::View<T*, MemorySpace>;

  // k_dim: the operand's contracted dimension (1 for A, 0 for B).
  summa_operand(dynamic_dtensor<T, 2, MemorySpace> const& x, std::size_t k_dim) : x_(x), k_dim_(k_dim) {
    mesh_shape const& shape = x.mesh().shape();
    k_ = shardmesh::detail::normalized(shape, x.bound()).dims[k_dim];
    axes_ = shardmesh::detail::dim_axes(k_);
    if (!axes_.empty()) group_ = &x.mesh().group(axes_);
  }

  [[nodiscard]] bound_dim const& k() const { return k_; }
  [[nodiscard]] bool travels() const { return group_ != nullptr; }
  // The extent of its other dimension here (A's rows, B's columns).
  [[nodiscard]] std::size_t other() const { return x_.local().extent(1 - k_dim_); }
  void use(std::array<strip_view, 2> buffers) { buffers_ = buffers; }

  // Starts moving strip [g, g + len) of tile `part` into `slot` (a
  // broadcast where k is sharded, complete on return if `how` is immediate;
  // nothing where every rank holds all of k). Kernels on exec must be
  // complete: the slot may have fed the last product.
  void start(std::size_t g, std::size_t len, tile_range part, std::size_t slot, completion how,
             execution_space_of<MemorySpace> const& exec) {
    mesh_shape const& shape = x_.mesh().shape();
    dim_location const at = locate(shape, k_, x_.global_extents()[k_dim_], g);
    slots_[slot] = {len, at.local, part, false, std::nullopt};
    if (!group_) return;
    mesh_coordinates const mine = coordinates_of(shape, x_.mesh().rank());
    std::size_t const holder = rank_of(shape, moved_to_index(k_, at, mine));
    slots_[slot].in_place = holder == x_.mesh().rank() && k_dim_ == 0 && part.size() == other();
    if (holder == x_.mesh().rank() && !slots_[slot].in_place) pack(slot, exec);
    strip_view const travelling =
        slots_[slot].in_place ? strip_view(x_.local().data() + at.local * other(), len * other()) : strip(slot);
    slots_[slot].pending.emplace(
        ibroadcast(*group_, travelling, static_cast<int>(group_position(shape, axes_, holder)), how, exec));
  }

  void wait(std::size_t slot) { slots_[slot].pending.reset(); }  // a request waits when it dies

  // Slot's strip (its tile) as a matrix for the local product: its first element and row stride.
  [[nodiscard]] T const* data(std::size_t slot) const {
    in_flight const& f = slots_[slot];
    if (group_ && !f.in_place) return buffers_[slot].data();
    auto const& v = x_.local();
    std::size_t const row = k_dim_ == 1 ? f.part.from : f.local, col = k_dim_ == 1 ? f.local : f.part.from;
    return v.data() + row * v.extent(1) + col;
  }
  [[nodiscard]] std::ptrdiff_t row_stride(std::size_t slot) const {
    in_flight const& f = slots_[slot];
    bool const buffered = group_ && !f.in_place;  // packed: the tile's rows of A, or its columns of B
    return static_cast<std::ptrdiff_t>(buffered ? (k_dim_ == 1 ? f.len : f.part.size()) : x_.local().extent(1));
  }

  // The holder copies its strip's tile into the slot, row-major, a row per
  // iteration (no division per element). On the host, on the calling
  // thread: a strip is a small copy beside its product, less than a
  // parallel region costs (whose runtime allocates a team per region).
  // Public: CUDA's extended lambdas may not live in private member functions.
  void pack(std::size_t slot, execution_space_of<MemorySpace> const& exec) {
    auto const v = x_.local();
    auto const out = strip(slot);
    std::size_t const local = slots_[slot].local, first = slots_[slot].part.from;
    bool const columns = k_dim_ == 1;
    std::size_t const rows = columns ? slots_[slot].part.size() : slots_[slot].len;
    std::size_t const width = columns ? slots_[slot].len : slots_[slot].part.size();
    if constexpr (std::is_same_v<MemorySpace, Kokkos::HostSpace>) {
      for (std::size_t row = 0; row < rows; ++row) {
        T const* const from = columns ? &v(first + row, local) : &v(local + row, first);
        std::copy(from, from + width, out.data() + row * width);
      }
    } else {
      Kokkos::parallel_for(
          "shardmesh::summa_pack", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, rows),
          KOKKOS_LAMBDA(std::size_t row) {
            T const* const from = columns ? &v(first + row, local) : &v(local + row, first);
            T* const to = out.data() + row * width;
            for (std::size_t col = 0; col < width; ++col) to[col] = from[col];
          });
      exec.fence("shardmesh::summa: the strip is packed before MPI reads it");
    }
  }

 private:
  struct in_flight {
    std::size_t len = 0;
    std::size_t local = 0;  // the strip's first index in the holder's shard
    tile_range part;        // the tile of the other dimension it moves
    bool in_place = false;  // B's holder of whole rows: the strip is its own rows
    std::optional<request> pending;
  };

  [[nodiscard]] strip_view strip(std::size_t slot) const {
    return Kokkos::subview(buffers_[slot],
                           Kokkos::make_pair(std::size_t{0}, slots_[slot].part.size() * slots_[slot].len));
  }

  dynamic_dtensor<T, 2, MemorySpace> x_;
  std::size_t k_dim_;
  std::array<strip_view, 2> buffers_;
  bound_dim k_;
  axis_set axes_;
  communicator const* group_ = nullptr;
  std::array<in_flight, 2> slots_;
};

// The steps this rank takes, in order, walked as the product goes (no list
// on the heap): strip by strip (every strip, or, when c is partial over
// layers (summa_2_5d), its layer's share: every layers-th from its own),
// tile by tile.
class summa_steps {
 public:
  struct step {
    std::size_t g = 0;  // the strip's first index of k
    std::size_t t = 0;  // the tile
  };

  summa_steps(device_mesh const& mesh, bound_dim const& ka, bound_dim const& kb, std::size_t extent, std::size_t width,
              std::size_t tiles, axis_set layers)
      : shape_(mesh.shape()), ka_(ka), kb_(kb), extent_(extent), width_(width), tiles_(tiles) {
    layers_ = layers.empty() ? 1 : group_size(shape_, layers);
    std::size_t const layer = layers.empty() ? 0 : group_position(shape_, layers, mesh.rank());
    first_ = strips_after({0, 0}, layer);
  }

  [[nodiscard]] step first() const { return first_; }
  [[nodiscard]] bool done(step at) const { return at.g >= extent_; }
  [[nodiscard]] step next(step at) const {
    return at.t + 1 < tiles_ ? step{at.g, at.t + 1} : strips_after(at, layers_);
  }
  // Where strip g ends.
  [[nodiscard]] std::size_t end_of(std::size_t g) const { return strip_end(shape_, ka_, kb_, extent_, g, width_); }

 private:
  [[nodiscard]] step strips_after(step at, std::size_t strips) const {
    for (; strips > 0 && !done(at); --strips) at = {end_of(at.g), 0};
    return {at.g, 0};
  }

  mesh_shape const& shape_;
  bound_dim const& ka_;
  bound_dim const& kb_;
  std::size_t extent_, width_, tiles_, layers_ = 1;
  step first_;
};

// c = alpha a.b by SUMMA in strips of `width`, each cut into `tiles` of
// the travelling operand's other dimension (tiles > 1 only where one
// operand travels), in layers where c is partial (each layer's sum of its
// strips' products). Precondition: c is in the layout product_layout gives
// a and b with k gathered (partial over axes neither uses, for layers), and
// is a's rows by b's columns on this rank.
template <class T, class MemorySpace>
void summa(dynamic_dtensor<T, 2, MemorySpace> const& a, dynamic_dtensor<T, 2, MemorySpace> const& b,
           dynamic_dtensor<T, 2, MemorySpace> const& c, accumulation_t<T> alpha, std::size_t width, std::size_t buffers,
           std::size_t tiles, execution_space_of<MemorySpace> const& exec) {
  device_mesh const& mesh = a.mesh();
  std::size_t const cols = b.local().extent(1), extent = a.global_extents()[1];
  summa_operand<T, MemorySpace> sa(a, 1);
  summa_operand<T, MemorySpace> sb(b, 0);
  // A step's range of each operand's other dimension: tile t where it travels and strips are tiled, else all.
  auto const range = [tiles](summa_operand<T, MemorySpace> const& x, std::size_t t) {
    return x.travels() && tiles > 1 ? tile_of(x.other(), tiles, t) : tile_range{0, x.other()};
  };
  std::size_t const na = sa.travels() ? range(sa, 0).size() * width : 0;
  std::size_t const nb = sb.travels() ? range(sb, 0).size() * width : 0;
  bool const overlapped = buffers > 1;  // else one strip per operand: received, then multiplied
  std::size_t const second = overlapped ? 1 : 0;
  auto const buffer = workspace_of<MemorySpace>(mesh).acquire((1 + second) * (na + nb) * sizeof(T));
  auto const all = buffer->template as<T>((1 + second) * (na + nb));
  auto const part = [&](std::size_t slot, std::size_t offset, std::size_t n) {
    std::size_t const at = offset + slot * second * n;
    return Kokkos::subview(all, Kokkos::make_pair(at, at + n));
  };
  sa.use({part(0, 0, na), part(1, 0, na)});
  sb.use({part(0, (1 + second) * na, nb), part(1, (1 + second) * na, nb)});
  summa_steps const steps(mesh, sa.k(), sb.k(), extent, width, tiles,
                          shardmesh::detail::normalized(mesh.shape(), c.bound()).partial_axes);
  using step = summa_steps::step;
  if (steps.done(steps.first())) Kokkos::deep_copy(exec, c.local(), T(0));
  // One strip in flight: blocking broadcasts, as nothing could overlap them.
  completion const how = overlapped ? completion::deferred : completion::immediate;
  auto const start = [&](step at, std::size_t slot) {
    std::size_t const len = steps.end_of(at.g) - at.g;
    sa.start(at.g, len, range(sa, at.t), slot, how, exec);
    sb.start(at.g, len, range(sb, at.t), slot, how, exec);
  };
  if (!steps.done(steps.first())) {
    exec.fence("shardmesh::summa: the operands are written");  // a host holder copies its strip off exec
    start(steps.first(), 0);
  }
  std::size_t slot = 0;
  for (step at = steps.first(); !steps.done(at); at = steps.next(at), slot ^= second) {
    bool const first_strip = at.g == steps.first().g;
    if (!overlapped && !(first_strip && at.t == 0)) {
      exec.fence("shardmesh::summa: the last product is done with the strips");
      start(at, slot);
    }
    if (step const after = steps.next(at); overlapped && !steps.done(after)) {  // it travels while this multiplies
      exec.fence("shardmesh::summa: the other slot's product is done");
      start(after, slot ^ 1);
    }
    sa.wait(slot);
    sb.wait(slot);
    tile_range const ra = range(sa, at.t), rb = range(sb, at.t);
    gemm_shape s;
    s.m = ra.size();
    s.n = rb.size();
    s.k = steps.end_of(at.g) - at.g;
    local_gemm(exec, s, alpha, sa.data(slot), gemm_strides{{}, sa.row_stride(slot), 1}, sb.data(slot),
               gemm_strides{{}, sb.row_stride(slot), 1}, first_strip ? 0 : 1,
               c.local().data() + ra.from * cols + rb.from, gemm_strides{{}, static_cast<std::ptrdiff_t>(cols), 1});
    shardmesh::progress(mesh);
  }
  exec.fence("shardmesh::summa");
}

}  // namespace shardmesh::ops::detail
