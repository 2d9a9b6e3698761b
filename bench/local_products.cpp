// Local (per-rank) products in reduced precision against the float BLAS,
// side by side in one run, every rank multiplying at once (meant for one
// rank per core):
//
//   local_product/<m>x<n>x<k>/<impl>  C = A B, row-major, on each rank:
//     fp32           ops::local_gemm on float: the host BLAS's sgemm (the
//                    baseline: what a user computes in without bf16)
//     bf16           ops::local_gemm on bf16: the backend it picks (oneDNN's
//                    matmul where it has a kernel for this CPU)
//     bf16_widened   the fallback for bf16: A and B widened to float, sgemm,
//                    C rounded to bf16 (ops/detail/widened_gemm.hpp)
//     fp16           ops::local_gemm on fp16: the backend it picks
//
// Time: the slowest rank's per product; counter gflops: 2 m n k per rank
// over that time. A 16-bit case fails if an element of its C differs from
// the float product by more than 2^-6 of the row's largest |a||b| sum (bf16
// rounds inputs at 2^-9 relative, fp16 at 2^-12; the sums run in float).
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"

#include <shardmesh/ops/local_gemm.hpp>

#include <benchmark/benchmark.h>
#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using ops::gemm_shape;
using ops::gemm_strides;

struct dims {
  std::size_t m, n, k;
};

gemm_shape shape_of(dims d) { return {0, {}, d.m, d.n, d.k}; }
gemm_strides row_major(std::size_t cols) { return {{}, static_cast<std::ptrdiff_t>(cols), 1}; }

std::vector<float> randoms(std::size_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(count);
  for (float& x : v) x = dist(gen);
  return v;
}

template <class T>
std::vector<T> converted(std::vector<float> const& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i]);
  return out;
}

// Whether c is the product of a and b within the bound above (each row's sum of |a||b|).
template <class T>
bool close_to_float(dims d, std::vector<float> const& a, std::vector<float> const& b, std::vector<T> const& c) {
  for (std::size_t i = 0; i < d.m; i += 17) {
    for (std::size_t j = 0; j < d.n; j += 13) {
      double sum = 0, magnitude = 0;
      for (std::size_t l = 0; l < d.k; ++l) {
        sum += static_cast<double>(a[i * d.k + l]) * b[l * d.n + j];
        magnitude += std::abs(static_cast<double>(a[i * d.k + l]) * b[l * d.n + j]);
      }
      if (std::abs(static_cast<double>(c[i * d.n + j]) - sum) > 0x1p-6 * magnitude) return false;
    }
  }
  return true;
}

template <class T, class Multiply>
void product_case(benchmark::State& state, dims d, Multiply&& multiply) {
  std::vector<float> const a = randoms(d.m * d.k, 1), b = randoms(d.k * d.n, 2);
  std::vector<T> const ta = converted<T>(a), tb = converted<T>(b);
  std::vector<T> c(d.m * d.n);
  time_max_over_ranks(state, [&] { multiply(ta.data(), tb.data(), c.data()); });
  if constexpr (!std::is_same_v<T, float>)
    if (!close_to_float(d, a, b, c)) state.SkipWithError("C differs from the float product beyond the bound");
  state.counters["gflops"] =
      benchmark::Counter(2.0 * static_cast<double>(d.m * d.n * d.k) * 1e-9 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

template <class T>
void through_local_gemm(benchmark::State& state, dims d) {
  Kokkos::DefaultHostExecutionSpace const exec;
  product_case<T>(state, d, [&](T const* a, T const* b, T* c) {
    ops::local_gemm(exec, shape_of(d), 1.0f, a, row_major(d.k), b, row_major(d.n), 0.0f, c, row_major(d.n));
    exec.fence();
  });
}

void bf16_widened(benchmark::State& state, dims d) {
  product_case<bf16>(state, d, [&](bf16 const* a, bf16 const* b, bf16* c) {
    std::int64_t count = 0;
    auto const walk = ops::detail::make_batch_walk(shape_of(d), row_major(d.k), row_major(d.n), row_major(d.n), count);
    ops::detail::set_blas_threads_once();
    ops::detail::widened_gemm(shape_of(d), walk, count, 1.0f, a, row_major(d.k), b, row_major(d.n), 0.0f, c,
                              row_major(d.n));
  });
}

void register_all() {
  // Squares, and a GPT block's MLP product (2048 tokens, hidden 768, 4 x 768 wide).
  for (std::size_t round = 0; round < rounds(); ++round)
    for (dims const d : {dims{512, 512, 512}, dims{1024, 1024, 1024}, dims{2048, 3072, 768}}) {
      std::string const prefix =
          "local_product/" + std::to_string(d.m) + "x" + std::to_string(d.n) + "x" + std::to_string(d.k) + "/";
      std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
      auto const add = [&](char const* impl, void (*run)(benchmark::State&, dims)) {
        benchmark::RegisterBenchmark(prefix + impl + suffix, [run, d](benchmark::State& s) { run(s, d); })
            ->UseManualTime()
            ->MinTime(0.5)
            ->Unit(benchmark::kMillisecond);
      };
      add("fp32", through_local_gemm<float>);
      add("bf16", through_local_gemm<bf16>);
      add("bf16_widened", bf16_widened);
      add("fp16", through_local_gemm<fp16>);
    }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
