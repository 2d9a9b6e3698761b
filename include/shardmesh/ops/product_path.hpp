#pragma once
// Which code multiplies a local product (ops/local_gemm.hpp), decided from
// where the operands live, their element type, C's type and the libraries
// the build has: a pure function, so that every combination, devices
// included, is tested on any machine.
//
//   where    element            libraries                 path
//   host     fp32, fp64 (C: T)  host BLAS                 host_blas
//   host     bf16, fp16         oneDNN or host BLAS       host_reduced (oneDNN, else widened around the BLAS)
//   cuda     any                cuBLAS                    cublas (16-bit: float accumulation, C of T or float)
//   hip      any                hipBLAS                   hipblas (likewise)
//   other elements (int, complex), other devices, or the library missing: portable (the tiled Kokkos kernel)
//
// Pure; no Kokkos or MPI.

#include "shardmesh/comm/memory_kind.hpp"

#include <string_view>

namespace shardmesh::ops {

enum class element_kind { fp64, fp32, bf16, fp16, other };  // other: int, complex, ...

// What the build links.
struct product_libraries {
  bool host_blas = false;
  bool onednn = false;
  bool cublas = false;
  bool hipblas = false;
};

enum class product_path { host_blas, host_reduced, cublas, hipblas, portable };

[[nodiscard]] constexpr std::string_view to_string(product_path p) {
  constexpr std::string_view names[] = {"host BLAS", "host reduced precision", "cuBLAS", "hipBLAS",
                                        "portable Kokkos kernel"};
  return names[static_cast<unsigned>(p)];
}

// The path for operands of `element` in `where` (C of the element type or, for 16-bit operands, of float: every
// path takes both).
[[nodiscard]] constexpr product_path choose_product_path(memory_kind where, element_kind element,
                                                         product_libraries const& have) {
  bool const sixteen_bit = element == element_kind::bf16 || element == element_kind::fp16;
  switch (where) {
    case memory_kind::host:
      if (element == element_kind::other) return product_path::portable;
      if (sixteen_bit) return have.onednn || have.host_blas ? product_path::host_reduced : product_path::portable;
      return have.host_blas ? product_path::host_blas : product_path::portable;
    case memory_kind::cuda:
      return have.cublas && element != element_kind::other ? product_path::cublas : product_path::portable;
    case memory_kind::hip:
      return have.hipblas && element != element_kind::other ? product_path::hipblas : product_path::portable;
    case memory_kind::other_device: break;
  }
  return product_path::portable;
}

}  // namespace shardmesh::ops
