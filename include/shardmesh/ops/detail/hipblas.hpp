#pragma once
// hipBLAS as vendor_gemm.hpp's Vendor, for HIP builds. Its V2 interface
// (hipDataType and hipblasComputeType_t, as cuBLAS's): hipBLAS 3 has only
// that one, hipBLAS 2 needs HIPBLAS_V2 defined before its header, which
// the build does (CMakeLists.txt) and a hand-written build must.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/errors.hpp"

#include <hipblas/hipblas.h>

#include <cstdint>
#include <string>
#include <type_traits>

#if !defined(HIPBLAS_V2) && defined(hipblasVersionMajor) && hipblasVersionMajor < 3
#error "shardmesh: hipBLAS 2 needs HIPBLAS_V2 defined before its header (hipDataType in hipblasGemmStridedBatchedEx)"
#endif

namespace shardmesh::ops::detail {

struct hipblas {
  using handle = hipblasHandle_t;
  using stream = hipStream_t;

  static void check(hipblasStatus_t status, char const* what) {
    if (status != HIPBLAS_STATUS_SUCCESS)
      throw error(std::string("local_gemm: ") + what + " failed: " + hipblasStatusToString(status));
  }
  static handle create(stream s) {
    handle h = nullptr;
    check(hipblasCreate(&h), "hipblasCreate");
    check(hipblasSetStream(h, s), "hipblasSetStream");
    return h;
  }
  static void destroy(handle h) { hipblasDestroy(h); }

  template <class T>
  static constexpr hipDataType data_type() {
    if constexpr (std::is_same_v<T, double>) return HIP_R_64F;
    if constexpr (std::is_same_v<T, float>) return HIP_R_32F;
    if constexpr (std::is_same_v<T, bf16>) return HIP_R_16BF;
    return HIP_R_16F;
  }
  // 16-bit operands accumulate in float, as on cuBLAS.
  template <class T>
  static constexpr hipblasComputeType_t compute() {
    return std::is_same_v<T, double> ? HIPBLAS_COMPUTE_64F : HIPBLAS_COMPUTE_32F;
  }

  template <class T, class Out>
  static void gemm(handle h, char ta, char tb, int m, int n, int k, accumulation_t<T> alpha, T const* a, int lda,
                   std::int64_t stride_a, T const* b, int ldb, std::int64_t stride_b, accumulation_t<T> beta, Out* c,
                   int ldc, std::int64_t stride_c, int batch) {
    auto const op = [](char t) { return t == 'T' ? HIPBLAS_OP_T : HIPBLAS_OP_N; };
    check(hipblasGemmStridedBatchedEx(h, op(ta), op(tb), m, n, k, &alpha, a, data_type<T>(), lda, stride_a, b,
                                      data_type<T>(), ldb, stride_b, &beta, c, data_type<Out>(), ldc, stride_c, batch,
                                      compute<T>(), HIPBLAS_GEMM_DEFAULT),
          "hipblasGemmStridedBatchedEx");
  }
};

}  // namespace shardmesh::ops::detail
