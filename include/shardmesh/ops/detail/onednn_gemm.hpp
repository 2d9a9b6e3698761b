#pragma once
// Products of 16-bit operands on the host through oneDNN's matmul, which
// multiplies bf16 at the CPU's bf16 rate (AVX512_BF16, AMX) and sums in
// float: the last batch dimension is oneDNN's batch (an operand broadcast
// over it has batch extent 1), the others a host loop; alpha a linear
// post-op, beta a sum post-op. A primitive per shape, strides, types,
// alpha and beta, made once per thread and kept; where oneDNN has no kernel
// but its reference loops (fp16 on CPUs without AVX512_FP16, say),
// onednn_gemm says so and the
// caller widens to float instead. oneDNN runs on the process's OpenMP
// threads (OMP_NUM_THREADS), as Kokkos's OpenMP backend does.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/gemm_shape.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace shardmesh::ops::detail {

template <class T>
constexpr dnnl::memory::data_type onednn_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, fp16>);
  if constexpr (std::is_same_v<T, float>)
    return dnnl::memory::data_type::f32;
  else if constexpr (std::is_same_v<T, bf16>)
    return dnnl::memory::data_type::bf16;
  else
    return dnnl::memory::data_type::f16;
}

struct onednn_product {
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
};

// What makes a primitive: batch, m, n, k; the strides of A, B, C (batch,
// row, column; a batch stride 0 broadcasts); the types; alpha and beta.
using onednn_key = std::tuple<std::array<std::int64_t, 4>, std::array<std::int64_t, 9>, int, int, float, float>;

inline dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The primitive for key, made on first use; nullopt where oneDNN has none.
template <class T, class Out>
std::optional<onednn_product> const& onednn_primitive(onednn_key const& key) {
  thread_local std::map<onednn_key, std::optional<onednn_product>> cache;
  auto const found = cache.find(key);
  if (found != cache.end()) return found->second;
  auto const& [extents, strides, in_type, out_type, alpha, beta] = key;
  auto const [batch, m, n, k] = extents;
  using dims = dnnl::memory::dims;
  auto const operand = [&](std::int64_t rows, std::int64_t cols, std::size_t at, dnnl::memory::data_type type) {
    // A batch extent of 1 (no batch, or broadcast) takes the matrix's span as its stride: oneDNN
    // orders dimensions by stride, and a small meaningless one misplaces the matrix's own.
    // Likewise a row or column of extent 1: its stride is the other dimension's span.
    std::int64_t row = strides[at + 1], col = strides[at + 2];
    if (rows == 1) row = cols * col;
    if (cols == 1) col = rows * row;
    bool const single = batch == 1 || strides[at] == 0;
    std::int64_t const span = (rows - 1) * row + (cols - 1) * col + 1;
    return dnnl::memory::desc(dims{single ? 1 : batch, rows, cols}, type, dims{single ? span : strides[at], row, col});
  };
  std::optional<onednn_product> made;
  try {  // throws where oneDNN takes neither these strides nor these types here
    dnnl::memory::desc const a = operand(m, k, 0, onednn_type<T>());
    dnnl::memory::desc const b = operand(k, n, 3, onednn_type<T>());
    dnnl::memory::desc const c = operand(m, n, 6, onednn_type<Out>());
    dnnl::post_ops ops;
    if (alpha != 1.0f) ops.append_eltwise(dnnl::algorithm::eltwise_linear, alpha, 0.0f);
    if (beta != 0.0f) ops.append_sum(beta);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    dnnl::matmul::primitive_desc const pd(onednn_engine(), a, b, c, attr);
    // Its reference kernel (plain loops) is slower than widening around the BLAS.
    if (std::string_view(pd.impl_info_str()).starts_with("ref")) return cache.emplace(key, std::nullopt).first->second;
    made = onednn_product{dnnl::matmul(pd), dnnl::memory(a, onednn_engine(), nullptr),
                          dnnl::memory(b, onednn_engine(), nullptr), dnnl::memory(c, onednn_engine(), nullptr)};
  } catch (dnnl::error const&) {
    made.reset();
  }
  return cache.emplace(key, std::move(made)).first->second;
}

// C = alpha A B + beta C by oneDNN; false (and nothing written) where
// oneDNN has no kernel. Preconditions: host-accessible operands, s.m and
// s.n not 0, count > 0.
template <class T, class Out>
bool onednn_gemm(gemm_shape const& s, batch_walk const& walk, std::int64_t count, float alpha, T const* a,
                 gemm_strides const& sa, T const* b, gemm_strides const& sb, float beta, Out* c,
                 gemm_strides const& sc) {
  if (s.k == 0) return false;
  std::size_t const last = s.batch_rank == 0 ? 0 : s.batch_rank - 1;
  std::int64_t const batch = s.batch_rank == 0 ? 1 : static_cast<std::int64_t>(s.batch[last]);
  auto const stride = [&](gemm_strides const& x) -> std::int64_t { return s.batch_rank == 0 ? 1 : x.batch[last]; };
  onednn_key const key{
      {batch, static_cast<std::int64_t>(s.m), static_cast<std::int64_t>(s.n), static_cast<std::int64_t>(s.k)},
      {stride(sa), sa.row, sa.col, stride(sb), sb.row, sb.col, stride(sc), sc.row, sc.col},
      static_cast<int>(onednn_type<T>()),
      static_cast<int>(onednn_type<Out>()),
      alpha,
      beta};
  auto const& product = onednn_primitive<T, Out>(key);
  if (!product) return false;
  static thread_local dnnl::stream stream(onednn_engine());
  onednn_product p = *product;  // handles: copies share the primitive
  // The outer batch dimensions on the host, the last one inside oneDNN.
  for (std::int64_t e = 0; e < count; e += batch) {
    std::int64_t oa = 0, ob = 0, oc = 0;
    walk.offsets(e, oa, ob, oc);
    p.a.set_data_handle(const_cast<T*>(a + oa));  // NOLINT(cppcoreguidelines-pro-type-const-cast): read only
    p.b.set_data_handle(const_cast<T*>(b + ob));  // NOLINT(cppcoreguidelines-pro-type-const-cast): read only
    p.c.set_data_handle(c + oc);
    p.primitive.execute(stream, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  }
  stream.wait();
  return true;
}

}  // namespace shardmesh::ops::detail
