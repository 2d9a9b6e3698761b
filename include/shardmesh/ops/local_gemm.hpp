#pragma once
// The local (per-rank) strided batched matrix product under sharded compute:
//   C(batch, m, n) = alpha * sum_k A(batch, m, k) * B(batch, k, n) + beta * C(batch, m, n)
// on one execution-space instance. A and B hold T (double, float, or a
// 16-bit float: bf16, fp16); C holds T or accumulation_t<T> (float for
// 16-bit operands, say gradients kept in float); every sum runs in
// accumulation_t<T>, and alpha and beta are of that type. Backends behind one call:
//  - local_gemm_blas: the host BLAS (sgemm_/dgemm_), one call per batch
//    entry. It fences `exec` first (earlier kernels on it must be complete)
//    and returns when C is written. It needs one unit stride per matrix;
//    otherwise it runs the Kokkos kernel and fences.
//  - local_gemm_reduced (16-bit operands on host memory): oneDNN's matmul
//    where the build has oneDNN and it has a kernel for T on this CPU (bf16
//    on AVX512_BF16 or AMX), else the operands widened to float around the
//    BLAS (detail/widened_gemm.hpp). Fences first, returns when done.
//  - the vendor's BLAS on device memory (detail/vendor_gemm.hpp: cuBLAS on
//    a CUDA build, hipBLAS on a HIP build), asynchronous on `exec`'s stream.
//  - local_gemm_kokkos: a portable Kokkos kernel in tiles staged through
//    team scratch memory, asynchronous on `exec`.
// local_gemm picks one through gemm_backend (below; ops/product_path.hpp).
//
// Preconditions: a, b and c are accessible from `exec` (from the host for
// BLAS); batch_rank <= max_batch_dims; C's elements are distinct (no batch
// stride 0 for C) and overlap neither A nor B. A batch stride 0 on A or B
// reuses that operand for every index of that batch dimension.
// Postconditions: every element of C is written; with beta == 0 it is not
// read first (so it may hold NaN); nothing outside C is written. Zero
// extents are fine: k == 0 gives beta * C (zeros when beta == 0).

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/blas.hpp"
#include "shardmesh/ops/detail/blas_plan.hpp"
#include "shardmesh/ops/detail/widened_gemm.hpp"
#include "shardmesh/ops/gemm_shape.hpp"
#include "shardmesh/ops/product_path.hpp"

#include <Kokkos_Core.hpp>

// The libraries the build links say so (CMakeLists.txt): oneDNN, cuBLAS on a CUDA build, hipBLAS on a HIP build.
#ifndef SHARDMESH_HAS_ONEDNN
#define SHARDMESH_HAS_ONEDNN 0
#endif
#if !defined(KOKKOS_ENABLE_CUDA) || !defined(SHARDMESH_HAS_CUBLAS)
#undef SHARDMESH_HAS_CUBLAS
#define SHARDMESH_HAS_CUBLAS 0
#endif
#if !defined(KOKKOS_ENABLE_HIP) || !defined(SHARDMESH_HAS_HIPBLAS)
#undef SHARDMESH_HAS_HIPBLAS
#define SHARDMESH_HAS_HIPBLAS 0
#endif
#if SHARDMESH_HAS_ONEDNN
#include "shardmesh/ops/detail/onednn_gemm.hpp"
#endif
#if SHARDMESH_HAS_CUBLAS
#include "shardmesh/ops/detail/cublas.hpp"
#endif
#if SHARDMESH_HAS_HIPBLAS
#include "shardmesh/ops/detail/hipblas.hpp"
#endif
#if SHARDMESH_HAS_CUBLAS || SHARDMESH_HAS_HIPBLAS
#include "shardmesh/ops/detail/vendor_gemm.hpp"
#endif

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

namespace shardmesh::ops {

// C's element type for operands of T: T itself, or the accumulation type.
template <class Out, class T>
concept product_output = std::is_same_v<Out, T> || std::is_same_v<Out, accumulation_t<T>>;

// The Kokkos backend, for where no library multiplies T on ExecSpace (and
// BLAS's strided fallback): C in tiles of `tile` x `tile`, one team each;
// the team walks k in steps of `tile`, staging a tile of A and one of B in
// its scratch memory (read once from memory, used `tile` times), and adds
// their product into the tile's sums, also in scratch (a team of one thread
// on a CPU, of many on a GPU: the same code). Each sum runs over k in
// ascending order in accumulation_t<T>. Asynchronous on `exec`.
template <class T, class Out, class ExecSpace>
  requires Kokkos::is_execution_space_v<ExecSpace> && product_output<Out, T>
void local_gemm_kokkos(ExecSpace const& exec, gemm_shape const& s, accumulation_t<T> alpha, T const* a,
                       gemm_strides const& sa, T const* b, gemm_strides const& sb, accumulation_t<T> beta, Out* c,
                       gemm_strides const& sc) {
  using A = accumulation_t<T>;
  constexpr std::int64_t tile = 16;
  std::int64_t count = 0;
  detail::batch_walk const walk = detail::make_batch_walk(s, sa, sb, sc, count);
  auto const m = static_cast<std::int64_t>(s.m);
  auto const n = static_cast<std::int64_t>(s.n);
  auto const k = static_cast<std::int64_t>(s.k);
  if (count == 0 || m == 0 || n == 0) return;
  std::int64_t const ar = sa.row, ac = sa.col, br = sb.row, bc = sb.col, cr = sc.row, cc = sc.col;
  std::int64_t const tiles_m = (m + tile - 1) / tile, tiles_n = (n + tile - 1) / tile;
  using policy = Kokkos::TeamPolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
  using member = typename policy::member_type;
  using scratch = Kokkos::View<A*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  constexpr std::int64_t area = tile * tile;
  bool const reads = alpha != A(0);  // as BLAS: alpha == 0 reads neither A nor B
  Kokkos::parallel_for(
      "shardmesh::ops::local_gemm_kokkos",
      policy(exec, count * tiles_m * tiles_n, Kokkos::AUTO)
          .set_scratch_size(0, Kokkos::PerTeam(scratch::shmem_size(3 * area))),
      KOKKOS_LAMBDA(member const& team) {
        std::int64_t const t = team.league_rank();
        std::int64_t const e = t / (tiles_m * tiles_n), i0 = (t / tiles_n) % tiles_m * tile, j0 = t % tiles_n * tile;
        std::int64_t oa = 0, ob = 0, oc = 0;
        walk.offsets(e, oa, ob, oc);
        scratch const at(team.team_scratch(0), area), bt(team.team_scratch(0), area), sum(team.team_scratch(0), area);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, area), [&](std::int64_t x) { sum(x) = A(0); });
        for (std::int64_t l0 = 0; reads && l0 < k; l0 += tile) {
          team.team_barrier();  // the previous step's products are done with the tiles
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, area), [&](std::int64_t x) {
            std::int64_t const r = x / tile, q = x % tile;
            at(x) = i0 + r < m && l0 + q < k ? static_cast<A>(a[oa + (i0 + r) * ar + (l0 + q) * ac]) : A(0);
            bt(x) = l0 + r < k && j0 + q < n ? static_cast<A>(b[ob + (l0 + r) * br + (j0 + q) * bc]) : A(0);
          });
          team.team_barrier();
          std::int64_t const depth = k - l0 < tile ? k - l0 : tile;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, area), [&](std::int64_t x) {
            std::int64_t const r = x / tile, q = x % tile;
            A acc = sum(x);
            for (std::int64_t l = 0; l < depth; ++l) acc += at(r * tile + l) * bt(l * tile + q);
            sum(x) = acc;
          });
        }
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, area), [&](std::int64_t x) {
          std::int64_t const i = i0 + x / tile, j = j0 + x % tile;
          if (i >= m || j >= n) return;
          Out& out = c[oc + i * cr + j * cc];
          out = static_cast<Out>(beta == A(0) ? alpha * sum(x) : alpha * sum(x) + beta * static_cast<A>(out));
        });
      });
}

// The BLAS backend, for float and double on host-accessible memory: fences
// `exec`, then returns when done.
template <class T, class ExecSpace>
  requires Kokkos::is_execution_space_v<ExecSpace>
void local_gemm_blas(ExecSpace const& exec, gemm_shape const& s, T alpha, T const* a, gemm_strides const& sa,
                     T const* b, gemm_strides const& sb, T beta, T* c, gemm_strides const& sc) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "local_gemm_blas: BLAS multiplies float and double only");
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecSpace::memory_space>::accessible,
                "local_gemm_blas: the execution space's memory is not accessible from the host");
  std::int64_t count = 0;
  detail::batch_walk const walk = detail::make_batch_walk(s, sa, sb, sc, count);
  exec.fence("shardmesh::ops::local_gemm_blas: wait for the inputs");
  auto const plan = detail::plan_blas(s, sa, sb, sc);
  if (!plan) {  // no unit stride in some matrix
    local_gemm_kokkos(exec, s, alpha, a, sa, b, sb, beta, c, sc);
    exec.fence("shardmesh::ops::local_gemm_blas: strided fallback");
    return;
  }
  if (count == 0 || s.m == 0 || s.n == 0) return;
  detail::set_blas_threads_once();
  for (std::int64_t e = 0; e < count; ++e) {
    std::int64_t oa = 0, ob = 0, oc = 0;
    walk.offsets(e, oa, ob, oc);
    T const* first = plan->swapped ? b + ob : a + oa;
    T const* second = plan->swapped ? a + oa : b + ob;
    detail::blas_gemm(plan->first.trans, plan->second.trans, plan->m, plan->n, plan->k, alpha, first, plan->first.ld,
                      second, plan->second.ld, beta, c + oc, plan->ldc);
  }
}

// The backend for 16-bit operands on host-accessible memory: oneDNN where
// it multiplies T here, else widened to float around the BLAS. Fences
// `exec`, then returns when done.
template <class T, class Out, class ExecSpace>
  requires Kokkos::is_execution_space_v<ExecSpace> && float16_element<T> && product_output<Out, T>
void local_gemm_reduced(ExecSpace const& exec, gemm_shape const& s, float alpha, T const* a, gemm_strides const& sa,
                        T const* b, gemm_strides const& sb, float beta, Out* c, gemm_strides const& sc) {
  static_assert(Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecSpace::memory_space>::accessible,
                "local_gemm_reduced: the execution space's memory is not accessible from the host");
  std::int64_t count = 0;
  detail::batch_walk const walk = detail::make_batch_walk(s, sa, sb, sc, count);
  exec.fence("shardmesh::ops::local_gemm_reduced: wait for the inputs");
  if (count == 0 || s.m == 0 || s.n == 0) return;
#if SHARDMESH_HAS_ONEDNN
  if (detail::onednn_gemm(s, walk, count, alpha, a, sa, b, sb, beta, c, sc)) return;
#endif
  detail::set_blas_threads_once();
  detail::widened_gemm(s, walk, count, alpha, a, sa, b, sb, beta, c, sc);
}

namespace detail {

template <class T>
constexpr element_kind element_kind_of() {
  if constexpr (std::is_same_v<T, double>) return element_kind::fp64;
  if constexpr (std::is_same_v<T, float>) return element_kind::fp32;
  if constexpr (std::is_same_v<T, bf16>) return element_kind::bf16;
  if constexpr (std::is_same_v<T, fp16>) return element_kind::fp16;
  return element_kind::other;
}

}  // namespace detail

// The libraries this build multiplies with.
inline constexpr product_libraries built_product_libraries{.host_blas = true,
                                                           .onednn = SHARDMESH_HAS_ONEDNN != 0,
                                                           .cublas = SHARDMESH_HAS_CUBLAS != 0,
                                                           .hipblas = SHARDMESH_HAS_HIPBLAS != 0};

// Which backend local_gemm uses for T on ExecSpace: choose_product_path
// (ops/product_path.hpp) for the space's memory, T and this build's
// libraries. A vendor library's call falls back to the portable kernel for
// matrices with no unit stride.
template <class ExecSpace, class T, class Out = T>
struct gemm_backend {
  static constexpr product_path path =
      choose_product_path(memory_kind_of<ExecSpace>(), detail::element_kind_of<T>(), built_product_libraries);
  static constexpr bool uses_host_blas = path == product_path::host_blas;
  static constexpr bool uses_reduced = path == product_path::host_reduced;

  static void run(ExecSpace const& exec, gemm_shape const& s, accumulation_t<T> alpha, T const* a,
                  gemm_strides const& sa, T const* b, gemm_strides const& sb, accumulation_t<T> beta, Out* c,
                  gemm_strides const& sc) {
    if constexpr (uses_host_blas) {
      local_gemm_blas(exec, s, alpha, a, sa, b, sb, beta, c, sc);
    } else if constexpr (uses_reduced) {
      local_gemm_reduced(exec, s, alpha, a, sa, b, sb, beta, c, sc);
#if SHARDMESH_HAS_CUBLAS
    } else if constexpr (path == product_path::cublas) {
      run_vendor<detail::cublas>(exec, exec.cuda_stream(), s, alpha, a, sa, b, sb, beta, c, sc);
#endif
#if SHARDMESH_HAS_HIPBLAS
    } else if constexpr (path == product_path::hipblas) {
      run_vendor<detail::hipblas>(exec, exec.hip_stream(), s, alpha, a, sa, b, sb, beta, c, sc);
#endif
    } else {
      local_gemm_kokkos(exec, s, alpha, a, sa, b, sb, beta, c, sc);
    }
  }

#if SHARDMESH_HAS_CUBLAS || SHARDMESH_HAS_HIPBLAS
  // Through the Vendor's library on `stream`, or the portable kernel where a matrix has no unit stride.
  template <class Vendor>
  static void run_vendor(ExecSpace const& exec, typename Vendor::stream stream, gemm_shape const& s,
                         accumulation_t<T> alpha, T const* a, gemm_strides const& sa, T const* b,
                         gemm_strides const& sb, accumulation_t<T> beta, Out* c, gemm_strides const& sc) {
    std::int64_t count = 0;
    detail::batch_walk const walk = detail::make_batch_walk(s, sa, sb, sc, count);
    if (!detail::vendor_gemm<Vendor, T, Out>(stream, s, walk, count, alpha, a, sa, b, sb, beta, c, sc))
      local_gemm_kokkos(exec, s, alpha, a, sa, b, sb, beta, c, sc);
  }
#endif
};

// C(batch, m, n) = alpha * sum_k A(batch, m, k) * B(batch, k, n) + beta * C(batch, m, n),
// by the backend gemm_backend<ExecSpace, T, Out> picks (see the top of this file).
template <class T, class Out, class ExecSpace>
  requires Kokkos::is_execution_space_v<ExecSpace> && product_output<Out, T>
void local_gemm(ExecSpace const& exec, gemm_shape const& s, std::type_identity_t<accumulation_t<T>> alpha, T const* a,
                gemm_strides const& sa, T const* b, gemm_strides const& sb,
                std::type_identity_t<accumulation_t<T>> beta, Out* c, gemm_strides const& sc) {
  gemm_backend<ExecSpace, T, Out>::run(exec, s, alpha, a, sa, b, sb, beta, c, sc);
}

}  // namespace shardmesh::ops
