#pragma once
// The shape of a strided batched matrix product (local_gemm.hpp) and the
// walk over its batch entries, which every backend shares.

#include "shardmesh/errors.hpp"

#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

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

}  // namespace detail

}  // namespace shardmesh::ops
