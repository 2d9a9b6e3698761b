#pragma once
// Matrix products of dtensors: the last two dimensions multiply, leading
// ones of A are batch dimensions (shared by B when B has them too).
//
//   auto y = matmul(x, w);          // x [..., m, k], w [k, n]: the layout the rules give
//   auto y = matmul<rows>(x, w);    // delivered in the constant layout `rows`
//
// A shorthand for einsum (einsum.hpp): "abik,kj->abij", "abik,abkj->abij".
//
// The result may hold partial sums: where both operands shard k on the same
// axes, each rank multiplies its slices and the cheapest result is
// P(sum) over those axes, not yet added up (y.layout().is_partial() says so).
// That is what a following row-parallel product or a reduce-scatter wants;
// for the complete product, name its layout: matmul<layout{shard("r"), replicated}>(x, w),
// or matmul(x, w, layout) for one chosen at run time.

#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/propagation.hpp"
#include "shardmesh/ops/einsum.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <cstddef>
#include <source_location>

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

// In the layout the propagation rules give: perhaps partial (see above).
template <class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] auto matmul(dynamic_dtensor<T, RA, MemorySpace> const& a, dynamic_dtensor<T, RB, MemorySpace> const& b,
                          execution_space_of<MemorySpace> const& exec = {},
                          std::source_location where = std::source_location::current()) {
  shardmesh::detail::called_from const site(where);
  require_held("matmul", a, b);
  return einsum<detail::matmul_spec<RA, RB>()>(a, b, exec);
}

// Delivered in `out`, a layout chosen at run time.
template <class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] auto matmul(dynamic_dtensor<T, RA, MemorySpace> const& a, dynamic_dtensor<T, RB, MemorySpace> const& b,
                          layout const& out, execution_space_of<MemorySpace> const& exec = {},
                          std::source_location where = std::source_location::current()) {
  shardmesh::detail::called_from const site(where);
  require_held("matmul", a, b);
  return einsum<detail::matmul_spec<RA, RB>()>(a, b, out, exec);
}

// Delivered in the constant layout Out.
template <layout Out, class T, std::size_t RA, std::size_t RB, class MemorySpace>
[[nodiscard]] dtensor<T, Out, MemorySpace> matmul(dynamic_dtensor<T, RA, MemorySpace> const& a,
                                                  dynamic_dtensor<T, RB, MemorySpace> const& b,
                                                  execution_space_of<MemorySpace> const& exec = {},
                                                  std::source_location where = std::source_location::current()) {
  shardmesh::detail::called_from const site(where);
  require_held("matmul", a, b);
  static_assert(Out.rank == RA, "matmul: the requested layout's rank differs from the product's");
  return dtensor<T, Out, MemorySpace>(einsum<detail::matmul_spec<RA, RB>()>(a, b, Out, exec));
}

}  // namespace shardmesh::ops
