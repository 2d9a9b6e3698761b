#pragma once
// SUMMA for C = alpha A.B of matrices (algebra/product_algorithm.hpp): the
// contracted dimension k walked in strips (all of them by every rank, or a
// share by each layer of ranks: summa_2_5d); each strip of A broadcast over
// the axes that shard A's k from the rank holding it, each strip of B over
// those of B's; every rank adds the strip's product into its block of C.
// Two strips of each operand that travels live in the mesh's workspace, so
// that the next strip's broadcasts are in flight while this one multiplies
// (or one, where the plan says a tight limit would make two too narrow);
// B's holder broadcasts its strip (whole rows) where it lies.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/product_algorithm.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/comm/broadcast.hpp"
#include "shardmesh/ops/local_gemm.hpp"
#include "shardmesh/runtime/progress.hpp"
#include "shardmesh/runtime/workspace.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <vector>

namespace shardmesh::ops::detail {

// One operand's side of the walk: where its k lies, who broadcasts each
// strip, and the two strips that may be in flight at once (slots 0 and 1).
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
  // Elements of a strip's buffer per index of k: 0 where every rank holds all of k.
  [[nodiscard]] std::size_t buffered() const { return group_ ? x_.local().extent(1 - k_dim_) : 0; }
  void use(std::array<strip_view, 2> buffers) { buffers_ = buffers; }

  // Starts moving strip [g, g + len) into `slot` (a broadcast where k is
  // sharded; nothing where every rank holds all of k). Kernels on exec must
  // be complete: the slot may have fed the last product.
  void start(std::size_t g, std::size_t len, std::size_t slot, execution_space_of<MemorySpace> const& exec) {
    mesh_shape const& shape = x_.mesh().shape();
    dim_location const at = locate(shape, k_, x_.global_extents()[k_dim_], g);
    slots_[slot] = {len, at.local, false, std::nullopt};
    if (!group_) return;
    mesh_coordinates const mine = coordinates_of(shape, x_.mesh().rank());
    std::size_t const holder = rank_of(shape, moved_to_index(k_, at, mine));
    slots_[slot].in_place = holder == x_.mesh().rank() && k_dim_ == 0;
    if (holder == x_.mesh().rank() && !slots_[slot].in_place) pack(slot, exec);
    strip_view const travelling =
        slots_[slot].in_place
            ? strip_view(x_.local().data() + at.local * x_.local().extent(1), len * x_.local().extent(1))
            : strip(slot);
    slots_[slot].pending.emplace(ibroadcast(*group_, travelling, static_cast<int>(group_position(shape, axes_, holder)),
                                            completion::deferred, exec));
  }

  void wait(std::size_t slot) { slots_[slot].pending.reset(); }  // a request waits when it dies

  // Slot's strip as a matrix for the local product: its first element and row stride.
  [[nodiscard]] T const* data(std::size_t slot) const {
    if (group_ && !slots_[slot].in_place) return buffers_[slot].data();
    auto const& v = x_.local();
    return k_dim_ == 1 ? v.data() + slots_[slot].local : v.data() + slots_[slot].local * v.extent(1);
  }
  [[nodiscard]] std::ptrdiff_t row_stride(std::size_t slot) const {
    auto const& v = x_.local();
    if (k_dim_ == 0) return static_cast<std::ptrdiff_t>(v.extent(1));             // B's strip: whole rows
    return static_cast<std::ptrdiff_t>(group_ ? slots_[slot].len : v.extent(1));  // A's: len columns of its rows
  }

  // The holder copies its strip into the slot, the strip's rows row-major,
  // a row per iteration (no division per element).
  // Public: CUDA's extended lambdas may not live in private member functions.
  void pack(std::size_t slot, execution_space_of<MemorySpace> const& exec) {
    auto const v = x_.local();
    auto const out = strip(slot);
    std::size_t const local = slots_[slot].local;
    std::size_t const width = k_dim_ == 1 ? slots_[slot].len : v.extent(1);
    bool const columns = k_dim_ == 1;
    Kokkos::parallel_for(
        "shardmesh::summa_pack", Kokkos::RangePolicy<execution_space_of<MemorySpace>>(exec, 0, out.extent(0) / width),
        KOKKOS_LAMBDA(std::size_t row) {
          T const* const from = columns ? &v(row, local) : &v(local + row, 0);
          T* const to = out.data() + row * width;
          for (std::size_t col = 0; col < width; ++col) to[col] = from[col];
        });
    exec.fence("shardmesh::summa: the strip is packed before MPI reads it");
  }

 private:
  struct in_flight {
    std::size_t len = 0;
    std::size_t local = 0;  // the strip's first index in the holder's shard
    bool in_place = false;  // B's holder: the strip is its own rows
    std::optional<request> pending;
  };

  [[nodiscard]] strip_view strip(std::size_t slot) const {
    std::size_t const other = x_.local().extent(1 - k_dim_);
    return Kokkos::subview(buffers_[slot], Kokkos::make_pair(std::size_t{0}, other * slots_[slot].len));
  }

  dynamic_dtensor<T, 2, MemorySpace> x_;
  std::size_t k_dim_;
  std::array<strip_view, 2> buffers_;
  bound_dim k_;
  axis_set axes_;
  communicator const* group_ = nullptr;
  std::array<in_flight, 2> slots_;
};

// The first indices of the strips this rank multiplies: every strip, or,
// when c is partial over layers (summa_2_5d), its layer's share.
[[nodiscard]] inline std::vector<std::size_t> strips_walked(device_mesh const& mesh, bound_dim const& ka,
                                                            bound_dim const& kb, std::size_t extent, std::size_t width,
                                                            axis_set layers) {
  mesh_shape const& shape = mesh.shape();
  std::size_t const count = layers.empty() ? 1 : group_size(shape, layers);
  std::size_t const layer = layers.empty() ? 0 : group_position(shape, layers, mesh.rank());
  std::vector<std::size_t> starts;
  std::size_t s = 0;
  for (std::size_t g = 0; g < extent; g = strip_end(shape, ka, kb, extent, g, width), ++s)
    if (layer_walks(s, layer, count)) starts.push_back(g);
  return starts;
}

// c = alpha a.b by SUMMA in strips of `width`, in layers where c is partial
// (each layer's sum of its strips' products). Precondition: c is in the
// layout product_layout gives a and b with k gathered (partial over axes
// neither uses, for layers), and is a's rows by b's columns on this rank.
template <class T, class MemorySpace>
void summa(dynamic_dtensor<T, 2, MemorySpace> const& a, dynamic_dtensor<T, 2, MemorySpace> const& b,
           dynamic_dtensor<T, 2, MemorySpace> const& c, accumulation_t<T> alpha, std::size_t width, std::size_t buffers,
           execution_space_of<MemorySpace> const& exec) {
  device_mesh const& mesh = a.mesh();
  std::size_t const rows = a.local().extent(0), cols = b.local().extent(1), extent = a.global_extents()[1];
  summa_operand<T, MemorySpace> sa(a, 1);
  summa_operand<T, MemorySpace> sb(b, 0);
  std::size_t const na = sa.buffered() * width, nb = sb.buffered() * width;
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
  mesh_shape const& shape = mesh.shape();
  std::vector<std::size_t> const starts =
      strips_walked(mesh, sa.k(), sb.k(), extent, width, shardmesh::detail::normalized(shape, c.bound()).partial_axes);
  if (starts.empty()) Kokkos::deep_copy(exec, c.local(), T(0));
  auto const end_of = [&](std::size_t g) { return strip_end(shape, sa.k(), sb.k(), extent, g, width); };
  auto const start = [&](std::size_t g, std::size_t slot) {
    sa.start(g, end_of(g) - g, slot, exec);
    sb.start(g, end_of(g) - g, slot, exec);
  };
  if (!starts.empty()) start(starts[0], 0);
  for (std::size_t i = 0, slot = 0; i < starts.size(); ++i, slot ^= second) {
    if (i > 0 && !overlapped) {
      exec.fence("shardmesh::summa: the last product is done with the strips");
      start(starts[i], slot);
    }
    if (i + 1 < starts.size() && overlapped) {  // the next strip travels while this one multiplies
      exec.fence("shardmesh::summa: the other slot's product is done");
      start(starts[i + 1], slot ^ 1);
    }
    sa.wait(slot);
    sb.wait(slot);
    gemm_shape s;
    s.m = rows;
    s.n = cols;
    s.k = end_of(starts[i]) - starts[i];
    local_gemm(exec, s, alpha, sa.data(slot), gemm_strides{{}, sa.row_stride(slot), 1}, sb.data(slot),
               gemm_strides{{}, sb.row_stride(slot), 1}, i == 0 ? 0 : 1, c.local().data(),
               gemm_strides{{}, static_cast<std::ptrdiff_t>(cols), 1});
    shardmesh::progress(mesh);
  }
  exec.fence("shardmesh::summa");
}

}  // namespace shardmesh::ops::detail
