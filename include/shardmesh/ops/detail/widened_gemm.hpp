#pragma once
// A product of 16-bit operands on the host through the float BLAS: each
// batch entry's A and B widened into dense float matrices (an operand
// broadcast over the batch is widened once), one sgemm, and C rounded back
// once (or written as float when C holds float). The sums run in float; the
// widening costs O(mk + kn + mn) beside the product's O(mnk). The fallback
// where oneDNN has no kernel for the type (fp16 on CPUs without
// AVX512_FP16) or the build has no oneDNN.

#include "shardmesh/ops/detail/blas.hpp"
#include "shardmesh/ops/gemm_shape.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shardmesh::ops::detail {

// The rows x cols matrix at p (element (i, j) at i * row + j * col) as
// dense row-major floats in out.
template <class T>
void widen_matrix(T const* p, std::size_t rows, std::size_t cols, std::ptrdiff_t row, std::ptrdiff_t col,
                  std::vector<float>& out) {
  out.resize(rows * cols);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      out[i * cols + j] =
          static_cast<float>(p[static_cast<std::ptrdiff_t>(i) * row + static_cast<std::ptrdiff_t>(j) * col]);
}

// Preconditions: host-accessible operands, s.m and s.n not 0, count > 0.
template <class T, class Out>
void widened_gemm(gemm_shape const& s, batch_walk const& walk, std::int64_t count, float alpha, T const* a,
                  gemm_strides const& sa, T const* b, gemm_strides const& sb, float beta, Out* c,
                  gemm_strides const& sc) {
  std::vector<float> wa, wb, wc;
  std::int64_t last_a = -1, last_b = -1;
  int const m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  for (std::int64_t e = 0; e < count; ++e) {
    std::int64_t oa = 0, ob = 0, oc = 0;
    walk.offsets(e, oa, ob, oc);
    if (oa != last_a) widen_matrix(a + oa, s.m, s.k, sa.row, sa.col, wa);
    if (ob != last_b) widen_matrix(b + ob, s.k, s.n, sb.row, sb.col, wb);
    last_a = oa;
    last_b = ob;
    if (beta != 0.0f)
      widen_matrix(c + oc, s.m, s.n, sc.row, sc.col, wc);
    else
      wc.assign(s.m * s.n, 0.0f);
    // Row-major C = A B is column-major C^T = B^T A^T.
    if (k > 0)
      blas_gemm('N', 'N', n, m, k, alpha, wb.data(), n, wa.data(), k, beta, wc.data(), n);
    else
      for (float& x : wc) x *= beta;
    for (std::size_t i = 0; i < s.m; ++i)
      for (std::size_t j = 0; j < s.n; ++j)
        c[oc + static_cast<std::ptrdiff_t>(i) * sc.row + static_cast<std::ptrdiff_t>(j) * sc.col] =
            static_cast<Out>(wc[i * s.n + j]);
  }
}

}  // namespace shardmesh::ops::detail
