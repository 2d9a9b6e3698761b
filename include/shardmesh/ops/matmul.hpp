#pragma once
// Matrix products of dtensors: the last two dimensions multiply, leading
// ones of A are batch dimensions (shared by B when B has them too).
//
//   auto y = matmul(x, w);          // x [..., m, k], w [k, n]: the layout the rules give
//   auto y = matmul<rows>(x, w);    // delivered in the constant layout `rows`
//
// A shorthand for einsum (einsum.hpp): "abik,kj->abij", "abik,abkj->abij".

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/ops/einsum.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>

namespace shardmesh::ops {

namespace detail {

// The index notation of a matrix product of ranks RA and RB (RB == 2 or RB == RA).
template <std::size_t RA, std::size_t RB>
consteval contraction_text matmul_spec() {
  static_assert(RA >= 2 && (RB == 2 || RB == RA), "matmul: B must be a matrix or have A's batch dimensions");
  contraction_text batch;
  for (std::size_t d = 0; d + 2 < RA; ++d) batch.append(std::string_view("abcd").substr(d, 1));
  contraction_text spec = batch;
  spec.append("ik,");
  if (RB == RA) spec.append(batch.view());
  spec.append("kj->").append(batch.view()).append("ij");
  return spec;
}

}  // namespace detail

template <class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] auto matmul(dynamic_dtensor<T, RA, MemorySpace> const& a, dynamic_dtensor<T, RB, MemorySpace> const& b,
                          execution_space_of<MemorySpace> const& exec = {}) {
  return einsum<detail::matmul_spec<RA, RB>()>(a, b, exec);
}

template <layout Out, class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] dtensor<T, Out, MemorySpace> matmul(dynamic_dtensor<T, RA, MemorySpace> const& a,
                                                  dynamic_dtensor<T, RB, MemorySpace> const& b,
                                                  execution_space_of<MemorySpace> const& exec = {}) {
  static_assert(Out.rank == RA, "matmul: the requested layout's rank differs from the product's");
  return dtensor<T, Out, MemorySpace>(einsum<detail::matmul_spec<RA, RB>()>(a, b, Out, exec));
}

}  // namespace shardmesh::ops
