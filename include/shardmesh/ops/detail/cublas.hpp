#pragma once
// cuBLAS as vendor_gemm.hpp's Vendor, for CUDA builds.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/errors.hpp"

#include <cublas_v2.h>

#include <cstdint>
#include <string>
#include <type_traits>

namespace shardmesh::ops::detail {

struct cublas {
  using handle = cublasHandle_t;
  using stream = cudaStream_t;

  static void check(cublasStatus_t status, char const* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
      throw error(std::string("local_gemm: ") + what + " failed: " + cublasGetStatusString(status));
  }
  static handle create(stream s) {
    handle h = nullptr;
    check(cublasCreate(&h), "cublasCreate");
    check(cublasSetStream(h, s), "cublasSetStream");
    return h;
  }
  static void destroy(handle h) { cublasDestroy(h); }

  template <class T>
  static constexpr cudaDataType_t data_type() {
    if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
    if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
    if constexpr (std::is_same_v<T, bf16>) return CUDA_R_16BF;
    return CUDA_R_16F;
  }
  // Float accumulation without TF32 (CUBLAS_COMPUTE_32F uses it only when asked).
  template <class T>
  static constexpr cublasComputeType_t compute() {
    return std::is_same_v<T, double> ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  }

  template <class T, class Out>
  static void gemm(handle h, char ta, char tb, int m, int n, int k, accumulation_t<T> alpha, T const* a, int lda,
                   std::int64_t stride_a, T const* b, int ldb, std::int64_t stride_b, accumulation_t<T> beta, Out* c,
                   int ldc, std::int64_t stride_c, int batch) {
    auto const op = [](char t) { return t == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N; };
    check(cublasGemmStridedBatchedEx(h, op(ta), op(tb), m, n, k, &alpha, a, data_type<T>(), lda, stride_a, b,
                                     data_type<T>(), ldb, stride_b, &beta, c, data_type<Out>(), ldc, stride_c, batch,
                                     compute<T>(), CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
  }
};

}  // namespace shardmesh::ops::detail
