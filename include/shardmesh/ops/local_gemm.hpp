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
//  - local_gemm_kokkos: a portable Kokkos kernel, asynchronous on `exec`.
// local_gemm picks one through gemm_backend (below).
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
#include "shardmesh/ops/detail/widened_gemm.hpp"
#include "shardmesh/ops/gemm_shape.hpp"
#if SHARDMESH_HAS_ONEDNN
#include "shardmesh/ops/detail/onednn_gemm.hpp"
#endif

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

namespace shardmesh::ops {

namespace detail {

// How BLAS computes one batch entry. Column-major BLAS writes either C
// (C column-major) or C^T = B^T A^T (C row-major: the usual swap); `first`
// and `second` are the operands of that product, A and B or B^T and A^T.
struct blas_plan {
  bool swapped = false;
  blas_operand first, second;
  int m = 0, n = 0, k = 0, ldc = 1;  // of the product BLAS computes
};

inline std::optional<blas_plan> plan_blas(gemm_shape const& s, gemm_strides const& sa, gemm_strides const& sb,
                                          gemm_strides const& sc) {
  auto const out = as_blas_operand(s.m, s.n, sc.row, sc.col);
  if (!out || !fits_int(static_cast<std::ptrdiff_t>(s.k))) return std::nullopt;
  blas_plan p;
  p.swapped = out->trans == 'T';
  p.ldc = out->ld;
  auto const first = p.swapped ? as_blas_operand(s.n, s.k, sb.col, sb.row) : as_blas_operand(s.m, s.k, sa.row, sa.col);
  auto const second = p.swapped ? as_blas_operand(s.k, s.m, sa.col, sa.row) : as_blas_operand(s.k, s.n, sb.row, sb.col);
  if (!first || !second) return std::nullopt;
  p.first = *first;
  p.second = *second;
  p.m = static_cast<int>(p.swapped ? s.n : s.m);
  p.n = static_cast<int>(p.swapped ? s.m : s.n);
  p.k = static_cast<int>(s.k);
  return p;
}

}  // namespace detail

// C's element type for operands of T: T itself, or the accumulation type.
template <class Out, class T>
concept product_output = std::is_same_v<Out, T> || std::is_same_v<Out, accumulation_t<T>>;

// The Kokkos backend: one thread per element of C, a plain loop over k in
// accumulation_t<T>. Asynchronous on `exec`.
template <class T, class Out, class ExecSpace>
  requires Kokkos::is_execution_space_v<ExecSpace> && product_output<Out, T>
void local_gemm_kokkos(ExecSpace const& exec, gemm_shape const& s, accumulation_t<T> alpha, T const* a,
                       gemm_strides const& sa, T const* b, gemm_strides const& sb, accumulation_t<T> beta, Out* c,
                       gemm_strides const& sc) {
  using A = accumulation_t<T>;
  std::int64_t count = 0;
  detail::batch_walk const walk = detail::make_batch_walk(s, sa, sb, sc, count);
  auto const m = static_cast<std::int64_t>(s.m);
  auto const n = static_cast<std::int64_t>(s.n);
  auto const k = static_cast<std::int64_t>(s.k);
  if (count == 0 || m == 0 || n == 0) return;
  std::int64_t const ar = sa.row, ac = sa.col, br = sb.row, bc = sb.col, cr = sc.row, cc = sc.col;
  std::int64_t const zero = 0;
  using policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3, Kokkos::Iterate::Right, Kokkos::Iterate::Right>,
                                       Kokkos::IndexType<std::int64_t>>;
  Kokkos::parallel_for(
      "shardmesh::ops::local_gemm_kokkos", policy(exec, {zero, zero, zero}, {count, m, n}),
      KOKKOS_LAMBDA(std::int64_t e, std::int64_t i, std::int64_t j) {
        std::int64_t oa = 0, ob = 0, oc = 0;
        walk.offsets(e, oa, ob, oc);
        A sum = A(0);
        if (alpha != A(0)) {  // as BLAS: alpha == 0 reads neither A nor B
          T const* row = a + oa + i * ar;
          T const* col = b + ob + j * bc;
          for (std::int64_t l = 0; l < k; ++l) sum += static_cast<A>(row[l * ac]) * static_cast<A>(col[l * br]);
        }
        Out& out = c[oc + i * cr + j * cc];
        out = static_cast<Out>(beta == A(0) ? alpha * sum : alpha * sum + beta * static_cast<A>(out));
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

// Which backend local_gemm uses for T on ExecSpace. The primary template
// takes BLAS when ExecSpace's memory is host-accessible and T is float or
// double, local_gemm_reduced when it is host-accessible and T is a 16-bit
// float, and the Kokkos kernel otherwise. A CUDA or HIP build routes its
// device products to the vendor BLAS by specialising it for its space, e.g.
//   template <class T>
//   struct shardmesh::ops::gemm_backend<Kokkos::Cuda, T> {
//     static constexpr bool uses_host_blas = false;
//     static void run(Kokkos::Cuda const& exec, gemm_shape const& s, T alpha, T const* a, gemm_strides const& sa,
//                     T const* b, gemm_strides const& sb, T beta, T* c, gemm_strides const& sc);
//   };
// whose run, for float or double with a plan from detail::plan_blas, binds
// a cuBLAS handle to exec.cuda_stream() (cublasSetStream) and calls
// cublas{S,D}gemmStridedBatched over the last batch dimension (the host loops
// over the others), staying asynchronous on exec; anything else goes to
// local_gemm_kokkos. HIP: hipblasSetStream, exec.hip_stream() and
// hipblas{S,D}gemmStridedBatched. The specialisation must be visible
// wherever local_gemm is instantiated for that space.
template <class ExecSpace, class T, class Out = T>
struct gemm_backend {
  static constexpr bool host =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecSpace::memory_space>::accessible;
  static constexpr bool uses_host_blas =
      host && (std::is_same_v<T, float> || std::is_same_v<T, double>) && std::is_same_v<Out, T>;
  static constexpr bool uses_reduced = host && float16_element<T>;

  static void run(ExecSpace const& exec, gemm_shape const& s, accumulation_t<T> alpha, T const* a,
                  gemm_strides const& sa, T const* b, gemm_strides const& sb, accumulation_t<T> beta, Out* c,
                  gemm_strides const& sc) {
    if constexpr (uses_host_blas)
      local_gemm_blas(exec, s, alpha, a, sa, b, sb, beta, c, sc);
    else if constexpr (uses_reduced)
      local_gemm_reduced(exec, s, alpha, a, sa, b, sb, beta, c, sc);
    else
      local_gemm_kokkos(exec, s, alpha, a, sa, b, sb, beta, c, sc);
  }
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
