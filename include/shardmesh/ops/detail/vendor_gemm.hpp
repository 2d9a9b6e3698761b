#pragma once
// Local products on device memory through the vendor's BLAS (cuBLAS on
// CUDA, hipBLAS on HIP; ops/product_path.hpp): a strided batched GEMM over
// the innermost batch dimension, the host enqueueing one call per entry of
// the others, all on the stream of the execution-space instance given:
// asynchronous, no fence. fp64 and fp32 compute in their type (fp32
// without TF32: the host BLAS's numbers, to rounding); bf16 and fp16
// operands accumulate in float, C of T or float. Column-major BLAS
// computes C, or C^T = B^T A^T for a row-major C (plan_blas).
//
// A Vendor (cublas.hpp, hipblas.hpp) names its handle and stream types and
// provides create(stream), destroy(handle), data_type<T>(), compute<T>()
// and gemm(handle, ...) with the vendor's strided batched Ex call. A handle
// per stream is made on first use and destroyed when Kokkos finalizes;
// handles are not thread-safe, and the calls on one stream come in the
// caller's order, as Kokkos's kernels do.

#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/ops/detail/blas_plan.hpp"
#include "shardmesh/ops/gemm_shape.hpp"

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

namespace shardmesh::ops::detail {

// The Vendor handle bound to `stream`, one per stream for the life of Kokkos.
template <class Vendor>
typename Vendor::handle vendor_handle(typename Vendor::stream stream) {
  static std::mutex lock;
  static std::map<typename Vendor::stream, typename Vendor::handle> handles;
  std::scoped_lock const held(lock);
  auto it = handles.find(stream);
  if (it != handles.end()) return it->second;
  if (handles.empty())
    Kokkos::push_finalize_hook([] {
      std::scoped_lock const h(lock);
      for (auto const& [s, handle] : handles) Vendor::destroy(handle);
      handles.clear();
    });
  return handles.emplace(stream, Vendor::create(stream)).first->second;
}

// C = alpha A B + beta C for every batch entry, on `stream`; or false
// (nothing run) when some matrix has no unit stride: the caller then runs
// the portable kernel.
template <class Vendor, class T, class Out>
bool vendor_gemm(typename Vendor::stream stream, gemm_shape const& s, batch_walk const& walk, std::int64_t count,
                 accumulation_t<T> alpha, T const* a, gemm_strides const& sa, T const* b, gemm_strides const& sb,
                 accumulation_t<T> beta, Out* c, gemm_strides const& sc) {
  static_assert(std::is_same_v<T, double> || std::is_same_v<T, float> || float16_element<T>);
  auto const plan = plan_blas(s, sa, sb, sc);
  if (!plan) return false;
  if (count == 0 || s.m == 0 || s.n == 0) return true;
  auto const handle = vendor_handle<Vendor>(stream);
  // The innermost batch dimension is the library's batch; the host walks the others.
  int const d = walk.rank - 1;
  std::int64_t const inner = d >= 0 ? walk.extent[d] : 1;
  std::int64_t const stride_a = d >= 0 ? walk.a[d] : 0, stride_b = d >= 0 ? walk.b[d] : 0,
                     stride_c = d >= 0 ? walk.c[d] : 0;
  for (std::int64_t e = 0; e < count; e += inner) {
    std::int64_t oa = 0, ob = 0, oc = 0;
    walk.offsets(e, oa, ob, oc);
    T const* first = plan->swapped ? b + ob : a + oa;
    T const* second = plan->swapped ? a + oa : b + ob;
    Vendor::template gemm<T, Out>(handle, plan->first.trans, plan->second.trans, plan->m, plan->n, plan->k, alpha,
                                  first, plan->first.ld, plan->swapped ? stride_b : stride_a, second, plan->second.ld,
                                  plan->swapped ? stride_a : stride_b, beta, c + oc, plan->ldc, stride_c,
                                  static_cast<int>(inner));
  }
  return true;
}

}  // namespace shardmesh::ops::detail
