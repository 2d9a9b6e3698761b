#pragma once
// How a strided matrix product maps onto a column-major BLAS call (the
// host's, or a vendor's on device memory): each matrix with one unit
// stride, as 'N' or 'T' with its leading dimension.

#include "shardmesh/ops/gemm_shape.hpp"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <optional>

namespace shardmesh::ops::detail {

// A rows x cols matrix with element (i, j) at i * row + j * col, as BLAS
// takes it: 'N' with leading dimension ld when it is column-major, 'T' when
// it is row-major (its transpose is column-major). A dimension of extent 1
// takes any stride. BLAS wants ld >= max(1, rows of what it stores) and ints.
struct blas_operand {
  char trans = 'N';
  int ld = 1;
};

inline bool fits_int(std::ptrdiff_t value) { return value >= 0 && value <= INT_MAX; }

inline std::optional<blas_operand> as_blas_operand(std::size_t rows, std::size_t cols, std::ptrdiff_t row,
                                                   std::ptrdiff_t col) {
  auto const r = static_cast<std::ptrdiff_t>(rows);
  auto const c = static_cast<std::ptrdiff_t>(cols);
  if (!fits_int(r) || !fits_int(c)) return std::nullopt;
  if (row == 1 || r <= 1) {  // column-major: columns are col apart
    std::ptrdiff_t const ld = c <= 1 ? std::max<std::ptrdiff_t>(1, r) : col;
    if (ld >= std::max<std::ptrdiff_t>(1, r) && fits_int(ld)) return blas_operand{'N', static_cast<int>(ld)};
  }
  if (col == 1 || c <= 1) {  // row-major: rows are row apart
    std::ptrdiff_t const ld = r <= 1 ? std::max<std::ptrdiff_t>(1, c) : row;
    if (ld >= std::max<std::ptrdiff_t>(1, c) && fits_int(ld)) return blas_operand{'T', static_cast<int>(ld)};
  }
  return std::nullopt;
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

}  // namespace shardmesh::ops::detail
