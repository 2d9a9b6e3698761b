#pragma once
// The local (per-rank) strided batched matrix product under sharded compute:
//   C(batch, m, n) = alpha * sum_k A(batch, m, k) * B(batch, k, n) + beta * C(batch, m, n)
// on one execution-space instance. Two backends behind one call:
//  - local_gemm_blas: the host BLAS (sgemm_/dgemm_), one call per batch
//    entry. It fences `exec` first (earlier kernels on it must be complete)
//    and returns when C is written. It needs one unit stride per matrix;
//    otherwise it runs the Kokkos kernel and fences.
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

#include "shardmesh/errors.hpp"
#include "shardmesh/ops/detail/blas.hpp"

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

namespace shardmesh::ops {

inline constexpr std::size_t max_batch_dims = 4;

// C(batch, m, n) = alpha * sum_k A(batch, m, k) * B(batch, k, n) + beta * C(batch, m, n)
struct gemm_shape {
  std::size_t batch_rank = 0;
  std::array<std::size_t, max_batch_dims> batch{};  // extents of the batch dimensions
  std::size_t m = 0, n = 0, k = 0;
};

// Strides in elements. A: (row, col) = (m, k); B: (k, n); C: (m, n). A batch stride of 0 broadcasts the operand.
struct gemm_strides {
  std::array<std::ptrdiff_t, max_batch_dims> batch{};
  std::ptrdiff_t row = 0, col = 0;
};

namespace detail {

// The offsets of one batch entry in A, B and C, from its flattened index
// (the last batch dimension fastest). Plain arrays, so kernels can copy it.
struct batch_walk {
  int rank = 0;
  std::int64_t extent[max_batch_dims] = {};
  std::int64_t a[max_batch_dims] = {}, b[max_batch_dims] = {}, c[max_batch_dims] = {};

  KOKKOS_FUNCTION void offsets(std::int64_t flat, std::int64_t& oa, std::int64_t& ob, std::int64_t& oc) const {
    oa = ob = oc = 0;
    for (int d = rank - 1; d >= 0; --d) {
      std::int64_t const i = flat % extent[d];
      flat /= extent[d];
      oa += i * a[d];
      ob += i * b[d];
      oc += i * c[d];
    }
  }
};

// The walk and the number of batch entries; throws on a batch rank over the limit.
inline batch_walk make_batch_walk(gemm_shape const& s, gemm_strides const& sa, gemm_strides const& sb,
                                  gemm_strides const& sc, std::int64_t& count) {
  if (s.batch_rank > max_batch_dims)
    throw error("local_gemm: batch rank " + std::to_string(s.batch_rank) + " exceeds max_batch_dims (" +
                std::to_string(max_batch_dims) + ")");
  batch_walk w;
  w.rank = static_cast<int>(s.batch_rank);
  count = 1;
  for (std::size_t d = 0; d < s.batch_rank; ++d) {
    w.extent[d] = static_cast<std::int64_t>(s.batch[d]);
    w.a[d] = sa.batch[d];
    w.b[d] = sb.batch[d];
    w.c[d] = sc.batch[d];
    count *= w.extent[d];
  }
  return w;
}

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

// The Kokkos backend: one thread per element of C, a plain loop over k.
// Asynchronous on `exec`.
template <class T, class ExecSpace>
  requires Kokkos::is_execution_space_v<ExecSpace>
void local_gemm_kokkos(ExecSpace const& exec, gemm_shape const& s, T alpha, T const* a, gemm_strides const& sa,
                       T const* b, gemm_strides const& sb, T beta, T* c, gemm_strides const& sc) {
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
        T sum = T(0);
        if (alpha != T(0)) {  // as BLAS: alpha == 0 reads neither A nor B
          T const* row = a + oa + i * ar;
          T const* col = b + ob + j * bc;
          for (std::int64_t l = 0; l < k; ++l) sum += row[l * ac] * col[l * br];
        }
        T& out = c[oc + i * cr + j * cc];
        out = beta == T(0) ? alpha * sum : alpha * sum + beta * out;
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

// Which backend local_gemm uses for T on ExecSpace. The primary template
// takes BLAS when ExecSpace's memory is host-accessible and T is float or
// double, and the Kokkos kernel otherwise. A CUDA or HIP build routes its
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
template <class ExecSpace, class T>
struct gemm_backend {
  static constexpr bool uses_host_blas =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecSpace::memory_space>::accessible &&
      (std::is_same_v<T, float> || std::is_same_v<T, double>);

  static void run(ExecSpace const& exec, gemm_shape const& s, T alpha, T const* a, gemm_strides const& sa, T const* b,
                  gemm_strides const& sb, T beta, T* c, gemm_strides const& sc) {
    if constexpr (uses_host_blas)
      local_gemm_blas(exec, s, alpha, a, sa, b, sb, beta, c, sc);
    else
      local_gemm_kokkos(exec, s, alpha, a, sa, b, sb, beta, c, sc);
  }
};

// C(batch, m, n) = alpha * sum_k A(batch, m, k) * B(batch, k, n) + beta * C(batch, m, n),
// by the backend gemm_backend<ExecSpace, T> picks (see the top of this file).
template <class T, class ExecSpace>
  requires Kokkos::is_execution_space_v<ExecSpace>
void local_gemm(ExecSpace const& exec, gemm_shape const& s, T alpha, T const* a, gemm_strides const& sa, T const* b,
                gemm_strides const& sb, T beta, T* c, gemm_strides const& sc) {
  gemm_backend<ExecSpace, T>::run(exec, s, alpha, a, sa, b, sb, beta, c, sc);
}

}  // namespace shardmesh::ops
