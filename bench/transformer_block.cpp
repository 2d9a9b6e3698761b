// One transformer block, forward and backward, against the same block
// written by hand the way Megatron-LM writes it, in the same binary and run:
//   shardmesh  parallel::transformer_block<float, HostSpace>: every
//              collective derived from the layers' layouts (transformer_layouts.hpp)
//   megatron   plain loops for layer norm, softmax, GELU and residuals, a
//              direct sgemm_ call for every product (per batch and head for
//              the attention products, the 1/sqrt(d) scale as alpha, the
//              q, k, v input gradients summed by beta = 1; q, k and v as
//              three products, since the block has three weights), the two
//              all-reduces of Megatron's g in forward and the two of its f
//              in backward (MPI_Allreduce in place), buffers allocated once
// and every distinct local product of the block on its own:
//   gemm       ops::local_gemm (the BLAS backend einsum calls, with the
//              geometry einsum gives it) against the raw sgemm_ calls of the
//              hand-written block: the wrapper's overhead per product
//
// Runs: "dpNxtpG" is N tensor-parallel groups of G ranks, each its own
// device_mesh {"tp", G} on a communicator split by hand, each working on
// batch / N sequences of the global batch. The groups are data-parallel
// replicas, but neither implementation reduces gradients over them: Megatron
// reduces data-parallel gradients once per step, after all micro-batches,
// not inside a block. (A mesh {"dp", N} x {"tp", G} would put that
// reduction into every parameter's accumulate, a cost the hand-written
// block would not have.) So per rank both do the same products on the same
// shards, and differ only in how they are called and in the collectives: on
// tp = 1 there are none. Every rank does the same work in every run of one
// rank count: tp = 1 and tp = 2 on 2 ranks are directly comparable.
//
// Shapes (global batch b, sequence t, hidden c, heads h of size 64, MLP f):
// b4_t128_c256_h4_f1024 and b4_t256_c512_h8_f2048; no sequence parallelism,
// no dropout, linear layers without bias, as parallel::transformer_block.
//
// Before timing, each case checks once that both implementations give the
// same output, input gradient and parameter gradients (within float
// tolerance); a mismatch fails the benchmark with the largest difference.
// Likewise each gemm case compares the two products.
//
// Names: block/run/shape/fwd+bwd/implementation[/round:k] and
// gemm/run/einsum/MxNxK:transposes[xcount]/implementation[/round:k], where
// transposes are those of the hand-written sgemm_ call on row-major
// operands. Time: the slowest rank's, per iteration (max over ranks);
// counters: fwd_ms and bwd_ms (the slowest rank's), collectives per step
// (calls_<kind> by kind), GEMM flops per rank per step. SHARDMESH_BENCH_ROUNDS (default 1) runs every case that
// many times with its implementations side by side, as bench/transitions.cpp.
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"

#include <shardmesh/ops/detail/blas.hpp>
#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using block_type = parallel::transformer_block<float, host>;
using activation = block_type::activation;

// ---------------------------------------------------------------------------
// Shapes and runs

struct block_shape {
  std::size_t batch, sequence, hidden, heads, head_size, ffn;
  std::size_t iterations;  // per repetition

  [[nodiscard]] std::string label() const {
    return "b" + std::to_string(batch) + "_t" + std::to_string(sequence) + "_c" + std::to_string(hidden) + "_h" +
           std::to_string(heads) + "_f" + std::to_string(ffn);
  }
};

constexpr block_shape shapes[] = {
    {4, 128, 256, 4, 64, 1024, 12},
    {4, 256, 512, 8, 64, 2048, 3},
};

constexpr float eps = 1e-5F;

// N groups of tp ranks: ranks [g * tp, (g + 1) * tp) form group g.
struct run_shape {
  int groups, tp;
  [[nodiscard]] std::string label() const { return "dp" + std::to_string(groups) + "xtp" + std::to_string(tp); }
};

// What one rank computes: its group's batch, its heads and MLP features.
struct local_dims {
  int b, t, c, h, d, f;
  [[nodiscard]] int bt() const { return b * t; }
  [[nodiscard]] int hd() const { return h * d; }
};

local_dims dims_of(block_shape const& s, run_shape const& r) {
  return {static_cast<int>(s.batch) / r.groups, static_cast<int>(s.sequence),  static_cast<int>(s.hidden),
          static_cast<int>(s.heads) / r.tp,     static_cast<int>(s.head_size), static_cast<int>(s.ffn) / r.tp};
}

bool fits(block_shape const& s, run_shape const& r) {
  auto const g = static_cast<std::size_t>(r.groups);
  auto const tp = static_cast<std::size_t>(r.tp);
  return s.batch % g == 0 && s.heads % tp == 0 && s.ffn % tp == 0;
}

// This rank's tensor-parallel group, split once per run shape and freed
// before Kokkos and MPI finalize.
struct tp_group {
  MPI_Comm comm = MPI_COMM_NULL;
  int index = 0;  // which group
  int rank = 0;   // position in it (the tp coordinate)
};

std::map<std::string, tp_group>& groups() {
  static std::map<std::string, tp_group> all;
  return all;
}

tp_group const& group_of(run_shape const& r) {
  tp_group& g = groups()[r.label()];
  if (g.comm == MPI_COMM_NULL) {
    g.index = world_rank() / r.tp;
    g.rank = world_rank() % r.tp;
    MPI_Comm_split(MPI_COMM_WORLD, g.index, g.rank, &g.comm);
  }
  return g;
}

// ---------------------------------------------------------------------------
// Values: parameters as parallel::gpt names them, global and row-major; the
// input and the output gradient of each group. Uniform, weights scaled by
// 1 / sqrt(fan in), so that activations stay O(1).

std::vector<double> uniform(std::size_t n, double scale, std::uint32_t seed, double offset = 0) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> out(n);
  for (double& v : out) v = offset + u(random);
  return out;
}

std::uint32_t seed_of(std::string const& name) {
  std::uint32_t h = 2166136261U;
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 16777619U;
  return h;
}

std::vector<double> parameter_values(block_shape const& s, std::string const& name) {
  std::size_t const c = s.hidden;
  std::size_t const hd = s.heads * s.head_size;
  std::uint32_t const seed = seed_of(name);
  if (name == "ln1_g" || name == "ln2_g") return uniform(c, 0.1, seed, 1.0);
  if (name == "ln1_b" || name == "ln2_b") return uniform(c, 0.1, seed);
  if (name == "wq" || name == "wk" || name == "wv") return uniform(c * hd, 1.0 / std::sqrt(double(c)), seed);
  if (name == "wo") return uniform(hd * c, 1.0 / std::sqrt(double(hd)), seed);
  if (name == "w1") return uniform(c * s.ffn, 1.0 / std::sqrt(double(c)), seed);
  if (name == "w2") return uniform(s.ffn * c, 1.0 / std::sqrt(double(s.ffn)), seed);
  throw std::runtime_error("transformer_block bench: no parameter " + name);
}

// Group g's part of a global [b, t, c] tensor.
std::vector<float> group_rows(block_shape const& s, run_shape const& r, int group, std::uint32_t seed) {
  std::vector<double> const all = uniform(s.batch * s.sequence * s.hidden, 1.0, seed);
  std::size_t const per = all.size() / static_cast<std::size_t>(r.groups);
  auto const first = all.begin() + static_cast<std::ptrdiff_t>(per * static_cast<std::size_t>(group));
  return {first, first + static_cast<std::ptrdiff_t>(per)};
}

// ---------------------------------------------------------------------------
// Products. Every product of the block as the hand-written block calls
// sgemm_ (row-major operands: C = alpha op(A) op(B) + beta C, over a batch
// of (b, h) pairs for the attention products), and as shardmesh computes
// it (the einsum and its operands' local extents).

struct product {
  std::string name;  // what it computes
  std::string spec;  // the einsum shardmesh runs it as
  std::vector<std::size_t> ea, eb;
  char ta = 'N', tb = 'N';
  int m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  int batches = 1, heads = 1;  // a GEMM per (batch, head)
  std::ptrdiff_t a_b = 0, a_h = 0, b_b = 0, b_h = 0, c_b = 0, c_h = 0;

  void operator()(float alpha, float const* a, float const* b, float beta, float* c) const {
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
    for (int i = 0; i < batches; ++i)
      for (int j = 0; j < heads; ++j)
        sgemm_(&tb, &ta, &n, &m, &k, &alpha, b + i * b_b + j * b_h, &ldb, a + i * a_b + j * a_h, &lda, &beta,
               c + i * c_b + j * c_h, &ldc, 1, 1);
  }
  [[nodiscard]] double flops() const { return 2.0 * m * n * k * batches * heads; }
  [[nodiscard]] std::string geometry() const {
    std::string g = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ":" + ta + tb;
    if (batches * heads > 1) g += "x" + std::to_string(batches * heads);
    return g;
  }
};

struct products {
  product qkv, scores, context, out, fc, proj;  // forward (qkv, scores, context: also backward)
  product proj_dw, proj_dx, fc_dw, fc_dx, out_dx, out_dw, value_grad, qkv_dw, qkv_dx;  // backward

  explicit products(local_dims const& l) {
    auto const u = [](int v) { return static_cast<std::size_t>(v); };
    std::size_t const b = u(l.b), t = u(l.t), c = u(l.c), h = u(l.h), d = u(l.d), f = u(l.f);
    int const bt = l.bt(), hd = l.hd(), tt = l.t * l.t;
    // Per (batch, head) of [b, t, h, d] and [b, h, t, t]: the offsets of its block.
    std::ptrdiff_t const row_b = std::ptrdiff_t{l.t} * hd, row_h = l.d;
    std::ptrdiff_t const sq_b = std::ptrdiff_t{l.h} * tt, sq_h = tt;
    auto const dense = [](std::string name, std::string spec, std::vector<std::size_t> ea, std::vector<std::size_t> eb,
                          char ta, char tb, int m, int n, int k, int lda, int ldb, int ldc) {
      product p;
      p.name = std::move(name);
      p.spec = std::move(spec);
      p.ea = std::move(ea);
      p.eb = std::move(eb);
      p.ta = ta;
      p.tb = tb;
      p.m = m, p.n = n, p.k = k, p.lda = lda, p.ldb = ldb, p.ldc = ldc;
      return p;
    };
    auto const per_head = [&](product p, std::ptrdiff_t ab, std::ptrdiff_t ah, std::ptrdiff_t bb, std::ptrdiff_t bh,
                              std::ptrdiff_t cb, std::ptrdiff_t ch) {
      p.batches = l.b, p.heads = l.h;
      p.a_b = ab, p.a_h = ah, p.b_b = bb, p.b_h = bh, p.c_b = cb, p.c_h = ch;
      return p;
    };
    // Forward.
    qkv = dense("q,k,v = x.Wq,k,v", "btc,chd->bthd", {b, t, c}, {c, h, d}, 'N', 'N', bt, hd, l.c, l.c, hd, hd);
    scores = per_head(dense("scores = q.k^T (d_prob = d_ctx.v^T)", "bthd,bshd->bhts", {b, t, h, d}, {b, t, h, d}, 'N',
                            'T', l.t, l.t, l.d, hd, hd, l.t),
                      row_b, row_h, row_b, row_h, sq_b, sq_h);
    context = per_head(dense("ctx = p.v (dq = ds.k)", "bhts,bshd->bthd", {b, h, t, t}, {b, t, h, d}, 'N', 'N', l.t, l.d,
                             l.t, l.t, hd, hd),
                       sq_b, sq_h, row_b, row_h, row_b, row_h);
    out = dense("out = ctx.Wo", "bthd,hdc->btc", {b, t, h, d}, {h, d, c}, 'N', 'N', bt, l.c, hd, hd, l.c, l.c);
    fc = dense("h = x.W1", "btc,cf->btf", {b, t, c}, {c, f}, 'N', 'N', bt, l.f, l.c, l.c, l.f, l.f);
    proj = dense("out = gelu(h).W2", "btf,fc->btc", {b, t, f}, {f, c}, 'N', 'N', bt, l.c, l.f, l.f, l.c, l.c);
    // Backward.
    proj_dw = dense("dW2 = g^T.dy", "btf,btc->fc", {b, t, f}, {b, t, c}, 'T', 'N', l.f, l.c, bt, l.f, l.c, l.c);
    proj_dx = dense("dg = dy.W2^T", "btc,fc->btf", {b, t, c}, {f, c}, 'N', 'T', bt, l.f, l.c, l.c, l.c, l.f);
    fc_dw = dense("dW1 = x^T.dh", "btc,btf->cf", {b, t, c}, {b, t, f}, 'T', 'N', l.c, l.f, bt, l.c, l.f, l.f);
    fc_dx = dense("dx = dh.W1^T", "btf,cf->btc", {b, t, f}, {c, f}, 'N', 'T', bt, l.c, l.f, l.f, l.f, l.c);
    out_dx = dense("dctx = dy.Wo^T", "btc,hdc->bthd", {b, t, c}, {h, d, c}, 'N', 'T', bt, hd, l.c, l.c, l.c, hd);
    out_dw = dense("dWo = ctx^T.dy", "bthd,btc->hdc", {b, t, h, d}, {b, t, c}, 'T', 'N', hd, l.c, bt, hd, l.c, l.c);
    value_grad = per_head(dense("dv = p^T.dctx (dk = ds^T.q)", "bhts,bthd->bshd", {b, h, t, t}, {b, t, h, d}, 'T', 'N',
                                l.t, l.d, l.t, l.t, hd, hd),
                          sq_b, sq_h, row_b, row_h, row_b, row_h);
    qkv_dw =
        dense("dWq,k,v = x^T.dq,k,v", "btc,bthd->chd", {b, t, c}, {b, t, h, d}, 'T', 'N', l.c, hd, bt, l.c, hd, hd);
    qkv_dx =
        dense("dx += dq,k,v.Wq,k,v^T", "bthd,chd->btc", {b, t, h, d}, {c, h, d}, 'N', 'T', bt, l.c, hd, hd, hd, l.c);
  }

  // Each distinct product once, with how often one step calls it.
  [[nodiscard]] std::vector<std::pair<product, int>> distinct() const {
    return {{qkv, 3},    {scores, 2},  {context, 2},    {out, 1},    {fc, 1},
            {proj, 1},   {proj_dw, 1}, {proj_dx, 1},    {fc_dw, 1},  {fc_dx, 1},
            {out_dx, 1}, {out_dw, 1},  {value_grad, 2}, {qkv_dw, 3}, {qkv_dx, 3}};
  }

  [[nodiscard]] double step_flops() const {
    double sum = 0;
    for (auto const& [p, calls] : distinct()) sum += p.flops() * calls;
    return sum;
  }
};

// ---------------------------------------------------------------------------
// The hand-written block: Megatron-LM's tensor-parallel transformer layer
// without dropout and biases, on one rank's shards, row-major float arrays.

// GELU's tanh form with 0.5 (1 + tanh(u)) written as the logistic 1 / (1 + exp(-2u)): one expf, as the
// library computes it, so that both sides do the same scalar math.
float gelu_gate(float x) {
  constexpr float k = 0.79788456080286535588F;
  constexpr float c = 0.044715F;
  return 1.0F / (1.0F + std::exp(-2.0F * k * (x + c * x * x * x)));
}

float gelu(float x) { return x * gelu_gate(x); }

float gelu_derivative(float x) {
  constexpr float k = 0.79788456080286535588F;
  constexpr float c = 0.044715F;
  float const s = gelu_gate(x);
  float const slope = s * (1.0F - s);  // sech^2(u) / 4
  return s + (slope == 0.0F ? 0.0F : 2.0F * x * slope * k * (1.0F + 3.0F * c * x * x));
}

// y = gamma * (x - mean) * rstd + beta per row of n; saves mean and rstd.
void layer_norm_forward(int rows, int n, float const* x, float const* gamma, float const* beta, float* y, float* mean,
                        float* rstd) {
  float const inv_n = 1.0F / static_cast<float>(n);
  for (int r = 0; r < rows; ++r) {
    float const* xr = x + std::ptrdiff_t{r} * n;
    float* yr = y + std::ptrdiff_t{r} * n;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; ++j) sum += xr[j];
    float const mu = sum * inv_n;
    float squares = 0;
#pragma omp simd reduction(+ : squares)
    for (int j = 0; j < n; ++j) squares += (xr[j] - mu) * (xr[j] - mu);
    float const s = 1.0F / std::sqrt(squares * inv_n + eps);
#pragma omp simd
    for (int j = 0; j < n; ++j) yr[j] = gamma[j] * ((xr[j] - mu) * s) + beta[j];
    mean[r] = mu;
    rstd[r] = s;
  }
}

// dx = residual + rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gamma * dy;
// dgamma = sum over rows of dy * xhat, dbeta = sum over rows of dy.
void layer_norm_backward(int rows, int n, float const* x, float const* gamma, float const* mean, float const* rstd,
                         float const* dy, float const* residual, float* dx, float* dgamma, float* dbeta) {
  float const inv_n = 1.0F / static_cast<float>(n);
  std::fill(dgamma, dgamma + n, 0.0F);
  std::fill(dbeta, dbeta + n, 0.0F);
  for (int r = 0; r < rows; ++r) {
    std::ptrdiff_t const o = std::ptrdiff_t{r} * n;
    float const mu = mean[r];
    float const s = rstd[r];
    float g_sum = 0;
    float gx_sum = 0;
#pragma omp simd reduction(+ : g_sum, gx_sum)
    for (int j = 0; j < n; ++j) {
      float const xhat = (x[o + j] - mu) * s;
      float const g = gamma[j] * dy[o + j];
      g_sum += g;
      gx_sum += g * xhat;
      dgamma[j] += dy[o + j] * xhat;
      dbeta[j] += dy[o + j];
    }
    float const g_mean = g_sum * inv_n;
    float const gx_mean = gx_sum * inv_n;
#pragma omp simd
    for (int j = 0; j < n; ++j) {
      float const xhat = (x[o + j] - mu) * s;
      dx[o + j] = residual[o + j] + s * (gamma[j] * dy[o + j] - g_mean - xhat * gx_mean);
    }
  }
}

class megatron_block {
 public:
  megatron_block(block_shape const& s, local_dims const& l, MPI_Comm tp, int tp_rank, int tp_size)
      : l_(l), p_(l), tp_(tp), tp_size_(tp_size), scale_(1.0F / std::sqrt(static_cast<float>(l.d))) {
    enum class split { none, rows, cols };
    // This rank's rows x cols block of a global matrix split by tp on its rows or columns (or whole).
    auto const shard = [&](std::string const& name, std::size_t rows, std::size_t cols, split how) {
      std::vector<double> const all = parameter_values(s, name);
      auto const r = static_cast<std::size_t>(tp_rank);
      std::size_t const total_cols = how == split::cols ? cols * static_cast<std::size_t>(tp_size) : cols;
      std::size_t const r0 = how == split::rows ? rows * r : 0;
      std::size_t const c0 = how == split::cols ? cols * r : 0;
      std::vector<float> out(rows * cols);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j)
          out[i * cols + j] = static_cast<float>(all[(r0 + i) * total_cols + c0 + j]);
      return out;
    };
    auto const u = [](int v) { return static_cast<std::size_t>(v); };
    std::size_t const c = u(l.c), hd = u(l.hd()), f = u(l.f), bt = u(l.bt());
    ln1_g_ = shard("ln1_g", 1, c, split::none), ln1_b_ = shard("ln1_b", 1, c, split::none);
    ln2_g_ = shard("ln2_g", 1, c, split::none), ln2_b_ = shard("ln2_b", 1, c, split::none);
    wq_ = shard("wq", c, hd, split::cols), wk_ = shard("wk", c, hd, split::cols), wv_ = shard("wv", c, hd, split::cols);
    wo_ = shard("wo", hd, c, split::rows);
    w1_ = shard("w1", c, f, split::cols);
    w2_ = shard("w2", f, c, split::rows);
    for (auto* g : {&d_ln1_g_, &d_ln1_b_, &d_ln2_g_, &d_ln2_b_}) g->resize(c);
    for (auto* g : {&dwq_, &dwk_, &dwv_}) g->resize(c * hd);
    dwo_.resize(hd * c), dw1_.resize(c * f), dw2_.resize(f * c);
    for (auto* a : {&x_, &y1_, &mid_, &y2_, &attn_out_, &mlp_out_, &y_, &dy2_, &d_mid_, &dy1_, &dx_}) a->resize(bt * c);
    for (auto* a : {&q_, &k_, &v_, &ctx_, &d_ctx_, &dq_, &dk_, &dv_}) a->resize(bt * hd);
    for (auto* a : {&h_, &g_, &dg_}) a->resize(bt * f);
    for (auto* a : {&mean1_, &rstd1_, &mean2_, &rstd2_}) a->resize(bt);
    probs_.resize(u(l.b) * u(l.h) * u(l.t) * u(l.t));
    d_scores_.resize(probs_.size());
  }

  // y = x + attention(ln1(x)); y += mlp(ln2(y)). x and y: [b, t, c] of the group.
  std::vector<float> const& forward(std::vector<float> const& x) {
    int const bt = l_.bt(), c = l_.c;
    std::copy(x.begin(), x.end(), x_.begin());  // saved for backward, as autograd keeps it
    layer_norm_forward(bt, c, x_.data(), ln1_g_.data(), ln1_b_.data(), y1_.data(), mean1_.data(), rstd1_.data());
    p_.qkv(1, y1_.data(), wq_.data(), 0, q_.data());
    p_.qkv(1, y1_.data(), wk_.data(), 0, k_.data());
    p_.qkv(1, y1_.data(), wv_.data(), 0, v_.data());
    p_.scores(scale_, q_.data(), k_.data(), 0, probs_.data());
    causal_softmax();
    p_.context(1, probs_.data(), v_.data(), 0, ctx_.data());
    p_.out(1, ctx_.data(), wo_.data(), 0, attn_out_.data());
    all_reduce(attn_out_);  // g: the row-parallel output
    add(x_, attn_out_, mid_);
    layer_norm_forward(bt, c, mid_.data(), ln2_g_.data(), ln2_b_.data(), y2_.data(), mean2_.data(), rstd2_.data());
    p_.fc(1, y2_.data(), w1_.data(), 0, h_.data());
    for (std::size_t i = 0; i < h_.size(); ++i) g_[i] = gelu(h_[i]);
    p_.proj(1, g_.data(), w2_.data(), 0, mlp_out_.data());
    all_reduce(mlp_out_);  // g
    add(mid_, mlp_out_, y_);
    return y_;
  }

  // dx from dy; the parameter gradients overwritten (one micro-batch).
  std::vector<float> const& backward(std::vector<float> const& dy) {
    int const bt = l_.bt(), c = l_.c;
    // MLP.
    p_.proj_dw(1, g_.data(), dy.data(), 0, dw2_.data());
    p_.proj_dx(1, dy.data(), w2_.data(), 0, dg_.data());
    for (std::size_t i = 0; i < dg_.size(); ++i) dg_[i] *= gelu_derivative(h_[i]);
    p_.fc_dw(1, y2_.data(), dg_.data(), 0, dw1_.data());
    p_.fc_dx(1, dg_.data(), w1_.data(), 0, dy2_.data());
    all_reduce(dy2_);  // f: the column-parallel input's gradient
    layer_norm_backward(bt, c, mid_.data(), ln2_g_.data(), mean2_.data(), rstd2_.data(), dy2_.data(), dy.data(),
                        d_mid_.data(), d_ln2_g_.data(), d_ln2_b_.data());
    // Attention.
    p_.out_dx(1, d_mid_.data(), wo_.data(), 0, d_ctx_.data());
    p_.out_dw(1, ctx_.data(), d_mid_.data(), 0, dwo_.data());
    p_.scores(1, d_ctx_.data(), v_.data(), 0, d_scores_.data());  // d_prob
    p_.value_grad(1, probs_.data(), d_ctx_.data(), 0, dv_.data());
    causal_softmax_backward();
    p_.context(1, d_scores_.data(), k_.data(), 0, dq_.data());
    p_.value_grad(1, d_scores_.data(), q_.data(), 0, dk_.data());
    p_.qkv_dw(1, y1_.data(), dq_.data(), 0, dwq_.data());
    p_.qkv_dw(1, y1_.data(), dk_.data(), 0, dwk_.data());
    p_.qkv_dw(1, y1_.data(), dv_.data(), 0, dwv_.data());
    p_.qkv_dx(1, dq_.data(), wq_.data(), 0, dy1_.data());
    p_.qkv_dx(1, dk_.data(), wk_.data(), 1, dy1_.data());
    p_.qkv_dx(1, dv_.data(), wv_.data(), 1, dy1_.data());
    all_reduce(dy1_);  // f
    layer_norm_backward(bt, c, x_.data(), ln1_g_.data(), mean1_.data(), rstd1_.data(), dy1_.data(), d_mid_.data(),
                        dx_.data(), d_ln1_g_.data(), d_ln1_b_.data());
    return dx_;
  }

  // This rank's shard of a parameter's gradient, by parallel::gpt's name.
  [[nodiscard]] std::vector<float> const& grad(std::string const& name) const {
    std::map<std::string, std::vector<float> const*> const by_name = {
        {"ln1_g", &d_ln1_g_}, {"ln1_b", &d_ln1_b_}, {"wq", &dwq_},        {"wk", &dwk_}, {"wv", &dwv_},
        {"wo", &dwo_},        {"ln2_g", &d_ln2_g_}, {"ln2_b", &d_ln2_b_}, {"w1", &dw1_}, {"w2", &dw2_}};
    return *by_name.at(name);
  }

  [[nodiscard]] products const& gemms() const { return p_; }

 private:
  void all_reduce(std::vector<float>& v) const {
    if (tp_size_ > 1) MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM, tp_);
  }

  static void add(std::vector<float> const& a, std::vector<float> const& b, std::vector<float>& out) {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = a[i] + b[i];
  }

  // probs (already scaled scores) = softmax over the keys up to each query.
  void causal_softmax() {
    int const t = l_.t;
    for (std::size_t row = 0; row < probs_.size() / static_cast<std::size_t>(t); ++row) {
      float* p = probs_.data() + row * static_cast<std::size_t>(t);
      int const visible = static_cast<int>(row % static_cast<std::size_t>(t)) + 1;
      float top = p[0];
      for (int j = 1; j < visible; ++j) top = std::max(top, p[j]);
      float total = 0;
      for (int j = 0; j < visible; ++j) {
        p[j] = std::exp(p[j] - top);
        total += p[j];
      }
      float const inv = 1.0F / total;
#pragma omp simd
      for (int j = 0; j < visible; ++j) p[j] *= inv;
      std::fill(p + visible, p + t, 0.0F);
    }
  }

  // d_scores (holding d_prob) = scale * p * (d_prob - sum(d_prob * p)) per row.
  void causal_softmax_backward() {
    int const t = l_.t;
    for (std::size_t row = 0; row < probs_.size() / static_cast<std::size_t>(t); ++row) {
      float const* p = probs_.data() + row * static_cast<std::size_t>(t);
      float* d = d_scores_.data() + row * static_cast<std::size_t>(t);
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j < t; ++j) dot += d[j] * p[j];
      float const sc = scale_;
#pragma omp simd
      for (int j = 0; j < t; ++j) d[j] = sc * p[j] * (d[j] - dot);
    }
  }

  local_dims l_;
  products p_;
  MPI_Comm tp_;
  int tp_size_;
  float scale_;
  std::vector<float> ln1_g_, ln1_b_, ln2_g_, ln2_b_, wq_, wk_, wv_, wo_, w1_, w2_;
  std::vector<float> d_ln1_g_, d_ln1_b_, d_ln2_g_, d_ln2_b_, dwq_, dwk_, dwv_, dwo_, dw1_, dw2_;
  std::vector<float> x_, mean1_, rstd1_, y1_, q_, k_, v_, probs_, ctx_, attn_out_, mid_, mean2_, rstd2_, y2_, h_, g_,
      mlp_out_, y_;
  std::vector<float> dg_, dy2_, d_mid_, d_ctx_, d_scores_, dq_, dk_, dv_, dy1_, dx_;
};

// ---------------------------------------------------------------------------
// A case: both implementations of one block on one run, built once (the
// first benchmark of the case builds it, on every rank alike) and checked
// against each other.

struct block_case {
  block_shape shape;
  run_shape run;
  local_dims dims;
  tp_group group;
  device_mesh mesh;
  std::optional<block_type> ours;
  activation x, dy;
  std::unique_ptr<megatron_block> theirs;
  std::vector<float> x_host, dy_host;
  std::string mismatch;  // empty when both agree

  block_case(block_shape const& s, run_shape const& r)
      : shape(s),
        run(r),
        dims(dims_of(s, r)),
        group(group_of(r)),
        mesh(group.comm, mesh_shape{{"tp", static_cast<std::size_t>(r.tp)}}) {
    parallel::gpt_config config;
    config.sequence = s.sequence;
    config.hidden = s.hidden;
    config.heads = s.heads;
    config.head_size = s.head_size;
    config.ffn = s.ffn;
    config.layers = 1;
    config.eps = eps;
    parallel::transformer_layouts const layouts(mesh.shape(), false);
    // Block 0 as the GPT declares it ("h0.wq", ...), its values by the name within the block.
    parallel::declared_parameters<float, host> const declared(
        mesh, parallel::gpt_stage_parameters(config, mesh.shape(), 1),
        [&](std::string const& name) { return parameter_values(s, name.substr(3)); });
    ours.emplace(parallel::gpt_architecture::make_block(declared, config, layouts, "h0."));
    x_host = group_rows(s, r, group.index, 1);
    dy_host = group_rows(s, r, group.index, 2);
    std::size_t const b = s.batch / static_cast<std::size_t>(r.groups);
    auto const to_tensor = [&](std::vector<float> const& v) {
      Kokkos::View<float***, Kokkos::LayoutRight, host> global("global", b, s.sequence, s.hidden);
      std::copy(v.begin(), v.end(), global.data());
      return distribute<host>(mesh, layouts.activation, global);
    };
    x = to_tensor(x_host);
    dy = to_tensor(dy_host);
    theirs = std::make_unique<megatron_block>(s, dims, group.comm, group.rank, r.tp);
    check();
  }

  std::pair<activation, activation> step_ours() {
    ours->for_each_parameter("", [](std::string const&, auto& p) { p.zero_grad(); });
    activation y = ours->forward(x);
    activation dx = ours->backward(dy);
    return {y, dx};
  }

  void step_theirs() {
    theirs->forward(x_host);
    theirs->backward(dy_host);
  }

  // The largest difference of each result, relative to the result's largest
  // value, over all ranks; `mismatch` names the worst one above tolerance.
  void check() {
    auto const [y, dx] = step_ours();
    std::vector<float> const want_y = theirs->forward(x_host);
    std::vector<float> const want_dx = theirs->backward(dy_host);
    std::vector<std::pair<std::string, double>> errors;
    auto const compare = [&](std::string const& what, float const* got, std::vector<float> const& want) {
      double largest = 0;
      double worst = 0;
      for (float w : want) largest = std::max(largest, double(std::abs(w)));
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::abs(got[i] - want[i])));
      errors.emplace_back(what, max_over_ranks(worst / std::max(largest, 1e-30)));
    };
    compare("output", gather(y).data(), want_y);
    compare("input gradient", gather(dx).data(), want_dx);
    ours->for_each_parameter("", [&](std::string const& name, auto& p) {
      compare("gradient of " + name, p.grad().local().data(), theirs->grad(name));
    });
    constexpr double tolerance = 1e-3;  // float sums of up to ~2000 terms in other orders: ~1e-5 seen
    auto const worst = std::max_element(errors.begin(), errors.end(),
                                        [](auto const& a, auto const& b) { return a.second < b.second; });
    if (worst->second > tolerance) {
      std::ostringstream out;
      out << "shardmesh and the hand-written block disagree: " << worst->first << " differs by " << worst->second
          << " of its largest value (tolerance " << tolerance << ")";
      mismatch = out.str();
    }
    if (world_rank() == 0) {
      std::fprintf(stderr, "[check] %s/%s: largest relative difference %.2g (%s)\n", run.label().c_str(),
                   shape.label().c_str(), worst->second, worst->first.c_str());
    }
  }
};

std::map<std::string, std::unique_ptr<block_case>>& cases() {
  static std::map<std::string, std::unique_ptr<block_case>> all;
  return all;
}

block_case& case_for(block_shape const& s, run_shape const& r) {
  auto& c = cases()[r.label() + "/" + s.label()];
  if (!c) c = std::make_unique<block_case>(s, r);
  return *c;
}

// Times forward() then backward() per iteration as the slowest rank's time,
// and each part apart (fwd_ms, bwd_ms: the slowest rank's mean).
template <class Forward, class Backward>
void time_step(benchmark::State& state, Forward&& forward, Backward&& backward) {
  double fwd = 0;
  double bwd = 0;
  time_max_over_ranks(state, [&] {
    double const start = MPI_Wtime();
    forward();
    double const middle = MPI_Wtime();
    backward();
    fwd += middle - start;
    bwd += MPI_Wtime() - middle;
  });
  auto const n = static_cast<double>(state.iterations());
  state.counters["fwd_ms"] = max_over_ranks(fwd / n * 1e3);
  state.counters["bwd_ms"] = max_over_ranks(bwd / n * 1e3);
}

void set_common(benchmark::State& state, block_case const& c, double collectives, double all_reduce_bytes) {
  state.counters["collectives"] = collectives;
  state.counters["flops"] = products(c.dims).step_flops();
  state.counters["ranks"] = static_cast<double>(world_size());
  state.SetBytesProcessed(static_cast<std::int64_t>(all_reduce_bytes * static_cast<double>(state.iterations())));
}

void run_shardmesh(benchmark::State& state, block_case& c) {
  if (!c.mismatch.empty()) {
    state.SkipWithError(c.mismatch);
    return;
  }
  c.step_ours();  // warm: plans made, workspaces filled
  c.mesh.counters().reset();
  activation y;
  time_step(
      state,
      [&] {
        c.ours->for_each_parameter("", [](std::string const&, auto& p) { p.zero_grad(); });
        y = c.ours->forward(c.x);
      },
      [&] { y = c.ours->backward(c.dy); });
  auto const n = static_cast<double>(state.iterations());
  collective_count const total = c.mesh.counters().total();
  set_common(state, c, max_over_ranks(static_cast<double>(total.calls) / n),
             max_over_ranks(static_cast<double>(total.bytes_sent) / n));
  // Per kind; every rank of a run issues the same ones (collectives), so rank 0's table is every rank's.
  for (auto const& [kind, count] : c.mesh.counters().all())
    state.counters["calls_" + kind] = static_cast<double>(count.calls) / n;
}

void run_megatron(benchmark::State& state, block_case& c) {
  if (!c.mismatch.empty()) {
    state.SkipWithError(c.mismatch);
    return;
  }
  c.step_theirs();  // warm
  time_step(state, [&] { c.theirs->forward(c.x_host); }, [&] { c.theirs->backward(c.dy_host); });
  // Four in-place all-reduces of [b, t, c]; an all-reduce of n bytes on p
  // ranks sends 2 (p - 1) / p n bytes per rank (ring or recursive halving).
  double const p = c.run.tp;
  double const bytes = 4 * 2 * (p - 1) / p * c.dims.bt() * c.dims.c * sizeof(float);
  set_common(state, c, c.run.tp > 1 ? 4 : 0, bytes);
  if (c.run.tp > 1) state.counters["calls_all_reduce"] = 4;
}

// ---------------------------------------------------------------------------
// One product: ops::local_gemm as einsum calls it against the raw sgemm_.

struct gemm_case {
  product p;
  ops::gemm_shape shape;
  ops::gemm_strides sa, sb, sc;
  std::vector<float> a, b, c_ours, c_theirs;

  explicit gemm_case(product const& pr) : p(pr) {
    contraction const k = parse_contraction(p.spec);
    tensor_index ea{}, eb{};
    std::copy(p.ea.begin(), p.ea.end(), ea.begin());
    std::copy(p.eb.begin(), p.eb.end(), eb.begin());
    auto const full = contraction_extents(k, std::span<std::size_t const>(ea.data(), p.ea.size()),
                                          std::span<std::size_t const>(eb.data(), p.eb.size()));
    tensor_index ec{};
    std::size_t size_c = 1;
    for (std::size_t d = 0; d < k.c.size(); ++d) size_c *= (ec[d] = full[d]);
    ops::detail::gemm_geometry(k, ea, eb, ec, shape, sa, sb, sc);
    auto const size = [](std::vector<std::size_t> const& e) {
      std::size_t n = 1;
      for (std::size_t v : e) n *= v;
      return n;
    };
    auto const fill = [](std::size_t n, std::uint32_t seed) {
      std::vector<double> const v = uniform(n, 1.0, seed);
      return std::vector<float>(v.begin(), v.end());
    };
    a = fill(size(p.ea), 3);
    b = fill(size(p.eb), 4);
    c_ours.assign(size_c, 0.0F);
    c_theirs.assign(size_c, 0.0F);
  }

  void ours() {
    ops::local_gemm(Kokkos::DefaultHostExecutionSpace{}, shape, 1.0F, a.data(), sa, b.data(), sb, 0.0F, c_ours.data(),
                    sc);
  }
  void theirs() { p(1.0F, a.data(), b.data(), 0.0F, c_theirs.data()); }

  [[nodiscard]] bool agree() {
    ours();
    theirs();
    double largest = 0;
    double worst = 0;
    for (std::size_t i = 0; i < c_theirs.size(); ++i) {
      largest = std::max(largest, double(std::abs(c_theirs[i])));
      worst = std::max(worst, double(std::abs(c_ours[i] - c_theirs[i])));
    }
    return max_over_ranks(worst / std::max(largest, 1e-30)) <= 1e-4;
  }
};

void run_gemm(benchmark::State& state, product const& p, bool shardmesh_side) {
  gemm_case g(p);
  if (!g.agree()) {
    state.SkipWithError("local_gemm and sgemm_ disagree on " + p.name);
    return;
  }
  if (shardmesh_side)
    time_max_over_ranks(state, [&] { g.ours(); });
  else
    time_max_over_ranks(state, [&] { g.theirs(); });
  state.counters["flops"] = p.flops();
  state.counters["ranks"] = static_cast<double>(world_size());
  double const bytes = double(g.a.size() + g.b.size() + g.c_ours.size()) * sizeof(float);
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes * static_cast<double>(state.iterations())));
}

// Enough iterations for about 20 ms of a product at ~20 GFLOP/s, at least 5.
std::int64_t gemm_iterations(product const& p) {
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(0.02 * 20e9 / p.flops()), 5, 2000);
}

// ---------------------------------------------------------------------------

void register_all() {
  auto const ranks = static_cast<int>(world_size());
  ops::detail::set_blas_threads_once();  // the hand-written calls follow the same thread rule
  Kokkos::push_finalize_hook([] {
    cases().clear();
    for (auto& [name, g] : groups())
      if (g.comm != MPI_COMM_NULL) MPI_Comm_free(&g.comm);
    groups().clear();
  });
  std::vector<run_shape> runs;
  for (int tp : {1, 2, 4})
    if (ranks % tp == 0) runs.push_back({ranks / tp, tp});
  auto const suffix = [](std::size_t round) { return rounds() > 1 ? "/round:" + std::to_string(round) : ""; };
  for (block_shape const& s : shapes)
    for (run_shape const& r : runs) {
      if (!fits(s, r)) continue;
      std::string const name = "block/" + r.label() + "/" + s.label() + "/fwd+bwd/";
      for (std::size_t round = 0; round < rounds(); ++round) {
        auto const add = [&](std::string const& impl, void (*run)(benchmark::State&, block_case&)) {
          benchmark::RegisterBenchmark(name + impl + suffix(round),
                                       [s, r, run](benchmark::State& state) { run(state, case_for(s, r)); })
              ->UseManualTime()
              ->Iterations(static_cast<std::int64_t>(s.iterations))
              ->Unit(benchmark::kMillisecond);
        };
        add("shardmesh", run_shardmesh);
        add("megatron", run_megatron);
      }
    }
  // The products of the first shape's runs.
  for (run_shape const& r : runs) {
    if (!fits(shapes[0], r)) continue;
    for (auto const& [p, calls] : products(dims_of(shapes[0], r)).distinct()) {
      std::string const name = "gemm/" + r.label() + "/" + p.spec + "/" + p.geometry() + "/";
      for (std::size_t round = 0; round < rounds(); ++round)
        for (bool ours : {true, false})
          benchmark::RegisterBenchmark(name + (ours ? "shardmesh" : "blas") + suffix(round),
                                       [p, ours, count = calls](benchmark::State& state) {
                                         run_gemm(state, p, ours);
                                         state.counters["uses_per_step"] = count;
                                       })
              ->UseManualTime()
              ->Iterations(gemm_iterations(p))
              ->Unit(benchmark::kMicrosecond);
    }
  }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
