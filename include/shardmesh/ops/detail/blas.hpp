#pragma once
// The host BLAS behind ops::local_gemm: the Fortran symbols sgemm_/dgemm_
// (any BLAS that CMake's FindBLAS finds has them) and the thread count
// (blas_plan.hpp: how a strided matrix is seen as a BLAS operand).
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

#include <charconv>
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

}  // namespace shardmesh::ops::detail
