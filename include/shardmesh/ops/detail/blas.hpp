#pragma once
// The host BLAS behind ops::local_gemm: the Fortran symbols sgemm_/dgemm_
// (any BLAS that CMake's FindBLAS finds has them), the thread count, and how
// a strided matrix is seen as a column-major BLAS operand.
//
// Threads: one BLAS thread per rank unless told otherwise, since ranks share
// the machine's cores and OpenBLAS would otherwise start one thread per core
// in every rank. On the first BLAS call:
//  - SHARDMESH_BLAS_THREADS=n (a positive integer) gives n threads;
//  - else, if OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is set, the count is
//    left alone: OpenBLAS has read them itself at start-up (in that order),
//    and a launcher that sets them has sized this rank's share of the cores;
//  - else the count is 1.
// The count is process-wide: it also applies to the program's own BLAS calls.
// It is set through openblas_set_num_threads, declared weak so that other
// BLAS libraries still link; without it, nothing is set.

#include "shardmesh/errors.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>

// Fortran BLAS, LP64 (Debian's libblas and libopenblas). The trailing
// arguments are the hidden lengths of the character arguments, as gfortran
// passes them; BLAS written in C (OpenBLAS) ignores them.
extern "C" {
void sgemm_(char const* transa, char const* transb, int const* m, int const* n, int const* k, float const* alpha,
            float const* a, int const* lda, float const* b, int const* ldb, float const* beta, float* c, int const* ldc,
            std::size_t transa_length, std::size_t transb_length);
void dgemm_(char const* transa, char const* transb, int const* m, int const* n, int const* k, double const* alpha,
            double const* a, int const* lda, double const* b, int const* ldb, double const* beta, double* c,
            int const* ldc, std::size_t transa_length, std::size_t transb_length);
// OpenBLAS only: null when the BLAS linked is another one.
void openblas_set_num_threads(int num_threads) __attribute__((weak));
}

namespace shardmesh::ops::detail {

// The BLAS thread count the rule above asks for; nullopt leaves it alone.
inline std::optional<int> requested_blas_threads() {
  if (char const* text = std::getenv("SHARDMESH_BLAS_THREADS")) {
    std::string const value(text);
    int threads = 0;
    auto const [end, status] = std::from_chars(value.data(), value.data() + value.size(), threads);
    if (status != std::errc{} || end != value.data() + value.size() || threads < 1)
      throw error("local_gemm: SHARDMESH_BLAS_THREADS must be a positive integer, not \"" + value + "\"");
    return threads;
  }
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr || std::getenv("OMP_NUM_THREADS") != nullptr) return std::nullopt;
  return 1;
}

inline void set_blas_threads_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::optional<int> const threads = requested_blas_threads();
    if (threads && openblas_set_num_threads != nullptr) openblas_set_num_threads(*threads);
  });
}

inline void blas_gemm(char transa, char transb, int m, int n, int k, float alpha, float const* a, int lda,
                      float const* b, int ldb, float beta, float* c, int ldc) {
  sgemm_(&transa, &transb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
}

inline void blas_gemm(char transa, char transb, int m, int n, int k, double alpha, double const* a, int lda,
                      double const* b, int ldb, double beta, double* c, int ldc) {
  dgemm_(&transa, &transb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
}

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

}  // namespace shardmesh::ops::detail
