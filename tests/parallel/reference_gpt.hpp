// A serial, double-precision reference GPT: forward pass and hand-derived backward pass, written
// with plain loops over std::vector<double>.
//
// The tensor-parallel GPT tests compare against this model, so it deliberately shares no code with
// shardmesh (no Kokkos, no MPI, no BLAS) and favours being obviously correct over being fast.
//
// Conventions. Every tensor is a flat std::vector<double> in row-major order; its shape is written
// next to it as [dim0][dim1]... with these dimension names:
//   V vocabulary size, T sequence length, C hidden width, H attention heads, D head dimension
//   (the attention width H*D need not equal C), F MLP hidden width, L layers, B batch size.
// Token and target arrays are std::vector<int> of shape [B][T] with values in [0, V).
//
// The model (pre-LayerNorm GPT, no biases on the linear maps), with LN(x; g, b) applied per
// (b, t) over c:  mu = mean_c x,  var = mean_c (x - mu)^2 (population variance),
// xhat = (x - mu) / sqrt(var + eps),  LN = xhat * g + b.
//
//   x[b][t][c] = wte[tokens[b][t]][c] + wpe[t][c]
//   for each block:
//     h1 = LN(x; ln1_g, ln1_b)
//     q[b][t][h][d] = sum_c h1[b][t][c] * wq[c][h][d]          (k with wk, v with wv)
//     s[b][h][t][u] = (sum_d q[b][t][h][d] * k[b][u][h][d]) / sqrt(D)   for u <= t
//     p[b][h][t][.] = softmax over u <= t of s[b][h][t][.]   (p = 0 exactly for u > t)
//     o[b][t][h][d] = sum_u p[b][h][t][u] * v[b][u][h][d]
//     x = x + a,  a[b][t][c] = sum_{h,d} o[b][t][h][d] * wo[h][d][c]
//     h2 = LN(x; ln2_g, ln2_b)
//     m[b][t][f] = sum_c h2[b][t][c] * w1[c][f]
//     g = gelu(m) = 0.5 * m * (1 + tanh(sqrt(2/pi) * (m + 0.044715 * m^3)))
//     x = x + y,  y[b][t][c] = sum_f g[b][t][f] * w2[f][c]
//   hf = LN(x; lnf_g, lnf_b)
//   logits[b][t][v] = sum_c hf[b][t][c] * whead[c][v]
//   loss = (1 / (B*T)) * sum_{b,t} (logsumexp_v logits[b][t][v] - logits[b][t][targets[b][t]])
// A target of -1 is padding: its position adds nothing, and the loss averages over the K
// positions whose target is not padding (1 / K instead of 1 / (B*T)).
//
// Every linear map above is a plain matrix product once its operands are seen as matrices: the
// activations [B][T][...] as [B*T][...] rows, wq/wk/wv [C][H][D] as [C][H*D], wo [H][D][C] as
// [H*D][C]. The code relies on that flattening.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace shardmesh::test::reference {

// The model's sizes; see the dimension names above.
struct config {
  std::size_t V = 0;  // vocabulary size
  std::size_t T = 0;  // sequence length
  std::size_t C = 0;  // hidden width
  std::size_t H = 0;  // attention heads
  std::size_t D = 0;  // head dimension
  std::size_t F = 0;  // MLP hidden width
  std::size_t L = 0;  // layers (blocks)
  std::size_t B = 0;  // batch size
  double eps = 1e-5;  // LayerNorm epsilon
};

// One transformer block's parameters.
struct block_parameters {
  std::vector<double> ln1_g;  // [C]
  std::vector<double> ln1_b;  // [C]
  std::vector<double> wq;     // [C][H][D]
  std::vector<double> wk;     // [C][H][D]
  std::vector<double> wv;     // [C][H][D]
  std::vector<double> wo;     // [H][D][C]
  std::vector<double> ln2_g;  // [C]
  std::vector<double> ln2_b;  // [C]
  std::vector<double> w1;     // [C][F]
  std::vector<double> w2;     // [F][C]
};

// All of the model's parameters. Gradients use the same type.
struct parameters {
  std::vector<double> wte;               // [V][C] token embedding
  std::vector<double> wpe;               // [T][C] position embedding
  std::vector<block_parameters> blocks;  // [L]
  std::vector<double> lnf_g;             // [C]
  std::vector<double> lnf_b;             // [C]
  std::vector<double> whead;             // [C][V]
};
using gradients = parameters;

// Calls f(name, values, shape) for every parameter, in this fixed order:
//   "wte", "wpe",
//   for l in 0..L-1: "h<l>.ln1_g", "h<l>.ln1_b", "h<l>.wq", "h<l>.wk", "h<l>.wv", "h<l>.wo",
//                    "h<l>.ln2_g", "h<l>.ln2_b", "h<l>.w1", "h<l>.w2",
//   "lnf_g", "lnf_b", "whead".
// name is a std::string, values the parameter's std::vector<double> (const if params is const), shape
// a std::vector<std::size_t> giving its documented shape. params.blocks must hold cfg.L blocks.
template <class Params, class Visitor>
  requires std::same_as<std::remove_const_t<Params>, parameters>
void for_each_parameter(config const& cfg, Params& params, Visitor&& f) {
  using shape = std::vector<std::size_t>;
  if (params.blocks.size() != cfg.L) throw std::invalid_argument("reference gpt: parameters hold the wrong L");
  f(std::string("wte"), params.wte, shape{cfg.V, cfg.C});
  f(std::string("wpe"), params.wpe, shape{cfg.T, cfg.C});
  for (std::size_t l = 0; l < cfg.L; ++l) {
    auto& blk = params.blocks[l];
    std::string const prefix = "h" + std::to_string(l) + ".";
    f(prefix + "ln1_g", blk.ln1_g, shape{cfg.C});
    f(prefix + "ln1_b", blk.ln1_b, shape{cfg.C});
    f(prefix + "wq", blk.wq, shape{cfg.C, cfg.H, cfg.D});
    f(prefix + "wk", blk.wk, shape{cfg.C, cfg.H, cfg.D});
    f(prefix + "wv", blk.wv, shape{cfg.C, cfg.H, cfg.D});
    f(prefix + "wo", blk.wo, shape{cfg.H, cfg.D, cfg.C});
    f(prefix + "ln2_g", blk.ln2_g, shape{cfg.C});
    f(prefix + "ln2_b", blk.ln2_b, shape{cfg.C});
    f(prefix + "w1", blk.w1, shape{cfg.C, cfg.F});
    f(prefix + "w2", blk.w2, shape{cfg.F, cfg.C});
  }
  f(std::string("lnf_g"), params.lnf_g, shape{cfg.C});
  f(std::string("lnf_b"), params.lnf_b, shape{cfg.C});
  f(std::string("whead"), params.whead, shape{cfg.C, cfg.V});
}

namespace detail {

inline std::size_t element_count(std::vector<std::size_t> const& shape) {
  std::size_t n = 1;
  for (std::size_t extent : shape) n *= extent;
  return n;
}

// splitmix64's output function: a bijective 64-bit mixer, the same on every platform.
inline std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A counter-based hash of (seed, stream, index).
inline std::uint64_t hash(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

// The top 53 bits of the hash as a double in [-1, 1); every step is exact, so the value is the
// same on every IEEE-754 platform.
inline double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  double const unit = static_cast<double>(hash(seed, stream, index) >> 11) * 0x1.0p-53;  // [0, 1)
  return 2.0 * unit - 1.0;
}

// Token streams have the top bit set; parameter streams (their index in for_each_parameter's order)
// never do, so the two never share a stream.
constexpr std::uint64_t token_stream_bit = std::uint64_t{1} << 63;

inline bool ends_with(std::string const& s, std::string const& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// out[N][M] = in[N][K] * w[K][M].
inline std::vector<double> matmul(std::vector<double> const& in, std::vector<double> const& w, std::size_t N,
                                  std::size_t K, std::size_t M) {
  std::vector<double> out(N * M, 0.0);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t m = 0; m < M; ++m) {
      double sum = 0.0;
      for (std::size_t k = 0; k < K; ++k) sum += in[n * K + k] * w[k * M + m];
      out[n * M + m] = sum;
    }
  return out;
}

// Backward of out = in * w (shapes as in matmul), given dout[N][M]: adds in^T * dout to dw[K][M]
// (dw[k][m] += sum_n in[n][k] * dout[n][m]) and returns din[N][K] = dout * w^T.
inline std::vector<double> matmul_backward(std::vector<double> const& in, std::vector<double> const& w,
                                           std::vector<double> const& dout, std::size_t N, std::size_t K, std::size_t M,
                                           std::vector<double>& dw) {
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t m = 0; m < M; ++m) {
      double sum = 0.0;
      for (std::size_t n = 0; n < N; ++n) sum += in[n * K + k] * dout[n * M + m];
      dw[k * M + m] += sum;
    }
  std::vector<double> din(N * K, 0.0);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t k = 0; k < K; ++k) {
      double sum = 0.0;
      for (std::size_t m = 0; m < M; ++m) sum += dout[n * M + m] * w[k * M + m];
      din[n * K + k] = sum;
    }
  return din;
}

}  // namespace detail

// What a LayerNorm's backward needs: the normalized input and 1/sqrt(var + eps) of every row.
struct layer_norm_cache {
  std::vector<double> xhat;  // [B][T][C]
  std::vector<double> rstd;  // [B][T]
};

// One block's activations, kept by forward for backward (and for tests to compare against).
struct block_activations {
  std::vector<double> x_in;   // [B][T][C] residual stream entering the block
  layer_norm_cache ln1;       // of LN(x_in; ln1)
  std::vector<double> h1;     // [B][T][C] LN(x_in; ln1)
  std::vector<double> q;      // [B][T][H][D]
  std::vector<double> k;      // [B][T][H][D]
  std::vector<double> v;      // [B][T][H][D]
  std::vector<double> p;      // [B][H][T][T] attention probabilities, 0 for u > t
  std::vector<double> o;      // [B][T][H][D] attention output before wo
  std::vector<double> x_mid;  // [B][T][C] residual stream after the attention's residual add
  layer_norm_cache ln2;       // of LN(x_mid; ln2)
  std::vector<double> h2;     // [B][T][C] LN(x_mid; ln2)
  std::vector<double> m;      // [B][T][F] MLP pre-activation
  std::vector<double> g;      // [B][T][F] gelu(m)
};

struct forward_result {
  double loss = 0.0;
  std::vector<double> logits;             // [B][T][V]
  std::vector<double> dlogits;            // [B][T][V] d(loss)/d(logits) = (softmax(logits) - onehot(target)) / (B*T)
  std::vector<block_activations> blocks;  // [L]
  std::vector<double> x_out;              // [B][T][C] residual stream after the last block
  layer_norm_cache lnf;                   // of LN(x_out; lnf)
  std::vector<double> hf;                 // [B][T][C] LN(x_out; lnf)
};

// Parameters (or gradients) of the right shapes, all zero.
inline parameters zero_parameters(config const& cfg) {
  parameters params;
  params.blocks.resize(cfg.L);
  for_each_parameter(cfg, params,
                     [](std::string const&, std::vector<double>& values, std::vector<std::size_t> const& shape) {
                       values.assign(detail::element_count(shape), 0.0);
                     });
  return params;
}

// Deterministic, platform-independent parameters. With u = uniform [-1, 1) value of
// hash(seed, parameter index in for_each_parameter's order, element index):
//   LayerNorm gains 1 + 0.1*u, LayerNorm biases 0.1*u, wte and wpe 0.5*u, and every other matrix
//   0.5*u/sqrt(fan_in) with fan_in = C for wq, wk, wv, w1, whead; H*D for wo; F for w2.
inline parameters init_parameters(config const& cfg, std::uint64_t seed) {
  parameters params = zero_parameters(cfg);
  std::uint64_t param_index = 0;
  for_each_parameter(cfg, params,
                     [&](std::string const& name, std::vector<double>& values, std::vector<std::size_t> const&) {
                       double scale = 0.0;  // value = offset + scale * u
                       double offset = 0.0;
                       if (detail::ends_with(name, "_g")) {
                         offset = 1.0;
                         scale = 0.1;
                       } else if (detail::ends_with(name, "_b")) {
                         scale = 0.1;
                       } else if (name == "wte" || name == "wpe") {
                         scale = 0.5;
                       } else {
                         std::size_t fan_in = cfg.C;
                         if (detail::ends_with(name, ".wo")) fan_in = cfg.H * cfg.D;
                         if (detail::ends_with(name, ".w2")) fan_in = cfg.F;
                         scale = 0.5 / std::sqrt(static_cast<double>(fan_in));
                       }
                       for (std::size_t i = 0; i < values.size(); ++i)
                         values[i] = offset + scale * detail::uniform(seed, param_index, static_cast<std::uint64_t>(i));
                       ++param_index;
                     });
  return params;
}

// B*T deterministic tokens in [0, V), shape [B][T]; different salts give independent streams (use
// one salt for the inputs and another for the targets).
inline std::vector<int> make_tokens(config const& cfg, std::uint64_t seed, std::uint64_t salt) {
  if (cfg.V == 0) throw std::invalid_argument("reference gpt: V must be positive");
  std::vector<int> tokens(cfg.B * cfg.T);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int>(detail::hash(seed, detail::token_stream_bit | salt, static_cast<std::uint64_t>(i)) %
                                 static_cast<std::uint64_t>(cfg.V));
  return tokens;
}

namespace detail {

inline void check_inputs(config const& cfg, parameters const& params, std::vector<int> const& tokens,
                         std::vector<int> const& targets) {
  if (cfg.V == 0 || cfg.T == 0 || cfg.C == 0 || cfg.H == 0 || cfg.D == 0 || cfg.F == 0 || cfg.B == 0)
    throw std::invalid_argument("reference gpt: every size but L must be positive");
  for_each_parameter(
      cfg, params,
      [](std::string const& name, std::vector<double> const& values, std::vector<std::size_t> const& shape) {
        if (values.size() != element_count(shape))
          throw std::invalid_argument("reference gpt: " + name + " has the wrong size");
      });
  if (tokens.size() != cfg.B * cfg.T || targets.size() != cfg.B * cfg.T)
    throw std::invalid_argument("reference gpt: tokens and targets must hold B*T values");
  auto const in_range = [&](int token) { return token >= 0 && static_cast<std::size_t>(token) < cfg.V; };
  auto const target_or_padding = [&](int target) { return target == -1 || in_range(target); };
  if (!std::all_of(tokens.begin(), tokens.end(), in_range) ||
      !std::all_of(targets.begin(), targets.end(), target_or_padding))
    throw std::invalid_argument("reference gpt: tokens must lie in [0, V), targets too or be -1 (padding)");
}

// y[N][C] = LN(x[N][C]; gain, bias), filling cache.
inline std::vector<double> layer_norm(std::vector<double> const& x, std::vector<double> const& gain,
                                      std::vector<double> const& bias, std::size_t N, std::size_t C, double eps,
                                      layer_norm_cache& cache) {
  std::vector<double> y(N * C);
  cache.xhat.assign(N * C, 0.0);
  cache.rstd.assign(N, 0.0);
  for (std::size_t n = 0; n < N; ++n) {
    double mean = 0.0;
    for (std::size_t c = 0; c < C; ++c) mean += x[n * C + c];
    mean /= static_cast<double>(C);
    double var = 0.0;
    for (std::size_t c = 0; c < C; ++c) var += (x[n * C + c] - mean) * (x[n * C + c] - mean);
    var /= static_cast<double>(C);
    double const sd = std::sqrt(var + eps);
    for (std::size_t c = 0; c < C; ++c) {
      double const xhat = (x[n * C + c] - mean) / sd;
      cache.xhat[n * C + c] = xhat;
      y[n * C + c] = xhat * gain[c] + bias[c];
    }
    cache.rstd[n] = 1.0 / sd;
  }
  return y;
}

// Backward of layer_norm given dy[N][C]: adds to dgain and dbias and returns dx[N][C]. With
// r = 1/sqrt(var + eps) and dxhat = dy * gain, differentiating xhat = (x - mu) * r through mu and
// var (population variance) gives
//   dx = r * (dxhat - mean_c(dxhat) - xhat * mean_c(dxhat * xhat)).
inline std::vector<double> layer_norm_backward(std::vector<double> const& dy, std::vector<double> const& gain,
                                               layer_norm_cache const& cache, std::size_t N, std::size_t C,
                                               std::vector<double>& dgain, std::vector<double>& dbias) {
  std::vector<double> dx(N * C);
  std::vector<double> dxhat(C);
  for (std::size_t n = 0; n < N; ++n) {
    double mean_dxhat = 0.0;
    double mean_dxhat_xhat = 0.0;
    for (std::size_t c = 0; c < C; ++c) {
      double const xhat = cache.xhat[n * C + c];
      dgain[c] += dy[n * C + c] * xhat;
      dbias[c] += dy[n * C + c];
      dxhat[c] = dy[n * C + c] * gain[c];
      mean_dxhat += dxhat[c];
      mean_dxhat_xhat += dxhat[c] * xhat;
    }
    mean_dxhat /= static_cast<double>(C);
    mean_dxhat_xhat /= static_cast<double>(C);
    for (std::size_t c = 0; c < C; ++c)
      dx[n * C + c] = cache.rstd[n] * (dxhat[c] - mean_dxhat - cache.xhat[n * C + c] * mean_dxhat_xhat);
  }
  return dx;
}

inline double gelu(double m) {
  double const k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * m * (1.0 + std::tanh(k * (m + 0.044715 * m * m * m)));
}

// d gelu / dm = 0.5 * (1 + tanh(z)) + 0.5 * m * (1 - tanh(z)^2) * k * (1 + 3 * 0.044715 * m^2),
// with z = k * (m + 0.044715 * m^3) and k = sqrt(2/pi).
inline double gelu_derivative(double m) {
  double const k = std::sqrt(2.0 / std::numbers::pi);
  double const th = std::tanh(k * (m + 0.044715 * m * m * m));
  return 0.5 * (1.0 + th) + 0.5 * m * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * m * m);
}

// Causal attention: fills p[B][H][T][T] and returns o[B][T][H][D] from q, k, v [B][T][H][D].
inline std::vector<double> attention(config const& cfg, std::vector<double> const& q, std::vector<double> const& k,
                                     std::vector<double> const& v, std::vector<double>& p) {
  std::size_t const B = cfg.B, T = cfg.T, H = cfg.H, D = cfg.D;
  double const sqrt_d = std::sqrt(static_cast<double>(D));
  auto const at = [&](std::size_t b, std::size_t t, std::size_t h, std::size_t d) {
    return ((b * T + t) * H + h) * D + d;
  };
  p.assign(B * H * T * T, 0.0);
  std::vector<double> o(B * T * H * D, 0.0);
  std::vector<double> s(T);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < T; ++t) {
        double* prow = &p[((b * H + h) * T + t) * T];
        double max = -std::numeric_limits<double>::infinity();
        for (std::size_t u = 0; u <= t; ++u) {
          double dot = 0.0;
          for (std::size_t d = 0; d < D; ++d) dot += q[at(b, t, h, d)] * k[at(b, u, h, d)];
          s[u] = dot / sqrt_d;
          max = std::max(max, s[u]);
        }
        double sum = 0.0;
        for (std::size_t u = 0; u <= t; ++u) {
          prow[u] = std::exp(s[u] - max);
          sum += prow[u];
        }
        for (std::size_t u = 0; u <= t; ++u) prow[u] /= sum;  // prow[u > t] stays exactly 0
        for (std::size_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (std::size_t u = 0; u <= t; ++u) acc += prow[u] * v[at(b, u, h, d)];
          o[at(b, t, h, d)] = acc;
        }
      }
  return o;
}

// Backward of attention given do_[B][T][H][D]: sets dq, dk, dv [B][T][H][D]. Per (b, h, t):
//   dp[u] = sum_d do[t][d] * v[u][d]          dv[u][d] += p[u] * do[t][d]
//   ds[u] = p[u] * (dp[u] - sum_w p[w] * dp[w])   (softmax backward; 0 where masked)
//   dq[t][d] += ds[u] * k[u][d] / sqrt(D)      dk[u][d] += ds[u] * q[t][d] / sqrt(D)
inline void attention_backward(config const& cfg, std::vector<double> const& q, std::vector<double> const& k,
                               std::vector<double> const& v, std::vector<double> const& p,
                               std::vector<double> const& do_, std::vector<double>& dq, std::vector<double>& dk,
                               std::vector<double>& dv) {
  std::size_t const B = cfg.B, T = cfg.T, H = cfg.H, D = cfg.D;
  double const sqrt_d = std::sqrt(static_cast<double>(D));
  auto const at = [&](std::size_t b, std::size_t t, std::size_t h, std::size_t d) {
    return ((b * T + t) * H + h) * D + d;
  };
  dq.assign(B * T * H * D, 0.0);
  dk.assign(B * T * H * D, 0.0);
  dv.assign(B * T * H * D, 0.0);
  std::vector<double> dp(T);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < T; ++t) {
        double const* prow = &p[((b * H + h) * T + t) * T];
        double p_dot_dp = 0.0;
        for (std::size_t u = 0; u <= t; ++u) {
          double dot = 0.0;
          for (std::size_t d = 0; d < D; ++d) {
            dot += do_[at(b, t, h, d)] * v[at(b, u, h, d)];
            dv[at(b, u, h, d)] += prow[u] * do_[at(b, t, h, d)];
          }
          dp[u] = dot;
          p_dot_dp += prow[u] * dp[u];
        }
        for (std::size_t u = 0; u <= t; ++u) {
          double const ds = prow[u] * (dp[u] - p_dot_dp);
          for (std::size_t d = 0; d < D; ++d) {
            dq[at(b, t, h, d)] += ds * k[at(b, u, h, d)] / sqrt_d;
            dk[at(b, u, h, d)] += ds * q[at(b, t, h, d)] / sqrt_d;
          }
        }
      }
}

}  // namespace detail

// The forward pass: loss, logits, d(loss)/d(logits) and every activation backward needs.
inline forward_result forward(config const& cfg, parameters const& params, std::vector<int> const& tokens,
                              std::vector<int> const& targets) {
  detail::check_inputs(cfg, params, tokens, targets);
  std::size_t const V = cfg.V, T = cfg.T, C = cfg.C, HD = cfg.H * cfg.D, F = cfg.F, B = cfg.B;
  std::size_t const N = B * T;  // rows of every [B][T][...] activation
  forward_result r;

  // Embeddings.
  std::vector<double> x(N * C);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < T; ++t) {
      auto const tok = static_cast<std::size_t>(tokens[b * T + t]);
      for (std::size_t c = 0; c < C; ++c) x[(b * T + t) * C + c] = params.wte[tok * C + c] + params.wpe[t * C + c];
    }

  // Blocks.
  r.blocks.resize(cfg.L);
  for (std::size_t l = 0; l < cfg.L; ++l) {
    block_parameters const& w = params.blocks[l];
    block_activations& act = r.blocks[l];
    act.x_in = x;
    act.h1 = detail::layer_norm(x, w.ln1_g, w.ln1_b, N, C, cfg.eps, act.ln1);
    act.q = detail::matmul(act.h1, w.wq, N, C, HD);
    act.k = detail::matmul(act.h1, w.wk, N, C, HD);
    act.v = detail::matmul(act.h1, w.wv, N, C, HD);
    act.o = detail::attention(cfg, act.q, act.k, act.v, act.p);
    std::vector<double> const a = detail::matmul(act.o, w.wo, N, HD, C);
    for (std::size_t i = 0; i < N * C; ++i) x[i] += a[i];
    act.x_mid = x;
    act.h2 = detail::layer_norm(x, w.ln2_g, w.ln2_b, N, C, cfg.eps, act.ln2);
    act.m = detail::matmul(act.h2, w.w1, N, C, F);
    act.g.resize(N * F);
    for (std::size_t i = 0; i < N * F; ++i) act.g[i] = detail::gelu(act.m[i]);
    std::vector<double> const y = detail::matmul(act.g, w.w2, N, F, C);
    for (std::size_t i = 0; i < N * C; ++i) x[i] += y[i];
  }
  r.x_out = x;

  // Head and loss.
  r.hf = detail::layer_norm(x, params.lnf_g, params.lnf_b, N, C, cfg.eps, r.lnf);
  r.logits = detail::matmul(r.hf, params.whead, N, C, V);
  r.dlogits.assign(N * V, 0.0);
  double total = 0.0;
  auto const K = static_cast<double>(std::count_if(targets.begin(), targets.end(), [](int t) { return t >= 0; }));
  for (std::size_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;  // padding
    double const* row = &r.logits[n * V];
    double const max = *std::max_element(row, row + V);
    double sum = 0.0;
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(row[v] - max);
    double const logsumexp = max + std::log(sum);
    auto const target = static_cast<std::size_t>(targets[n]);
    total += logsumexp - row[target];
    for (std::size_t v = 0; v < V; ++v)
      r.dlogits[n * V + v] = (std::exp(row[v] - logsumexp) - (v == target ? 1.0 : 0.0)) / K;
  }
  r.loss = total / K;
  return r;
}

// The backward pass: d(loss)/d(parameter) for every parameter, from forward's result for the same
// parameters, tokens and targets (the targets enter through fwd.dlogits, which is d(loss)/d(logits);
// they are only validated here).
inline gradients backward(config const& cfg, parameters const& params, forward_result const& fwd,
                          std::vector<int> const& tokens, std::vector<int> const& targets) {
  detail::check_inputs(cfg, params, tokens, targets);
  std::size_t const V = cfg.V, T = cfg.T, C = cfg.C, HD = cfg.H * cfg.D, F = cfg.F, B = cfg.B;
  std::size_t const N = B * T;
  if (fwd.blocks.size() != cfg.L || fwd.dlogits.size() != N * V)
    throw std::invalid_argument("reference gpt: forward result does not match the config");
  gradients grads = zero_parameters(cfg);

  // Head: logits = hf * whead, hf = LN(x_out; lnf).
  std::vector<double> const dhf = detail::matmul_backward(fwd.hf, params.whead, fwd.dlogits, N, C, V, grads.whead);
  std::vector<double> dx = detail::layer_norm_backward(dhf, params.lnf_g, fwd.lnf, N, C, grads.lnf_g, grads.lnf_b);

  // Blocks, last first; dx is d(loss)/d(residual stream) at the current point.
  for (std::size_t l = cfg.L; l-- > 0;) {
    block_parameters const& w = params.blocks[l];
    block_parameters& dw = grads.blocks[l];
    block_activations const& act = fwd.blocks[l];

    // MLP: x_out = x_mid + gelu(LN(x_mid; ln2) * w1) * w2.
    std::vector<double> dm = detail::matmul_backward(act.g, w.w2, dx, N, F, C, dw.w2);   // d(loss)/d(g) ...
    for (std::size_t i = 0; i < N * F; ++i) dm[i] *= detail::gelu_derivative(act.m[i]);  // ... now d(loss)/d(m)
    std::vector<double> const dh2 = detail::matmul_backward(act.h2, w.w1, dm, N, C, F, dw.w1);
    std::vector<double> const dx_ln2 = detail::layer_norm_backward(dh2, w.ln2_g, act.ln2, N, C, dw.ln2_g, dw.ln2_b);
    for (std::size_t i = 0; i < N * C; ++i) dx[i] += dx_ln2[i];  // now d(loss)/d(x_mid)

    // Attention: x_mid = x_in + attention(LN(x_in; ln1)) * wo.
    std::vector<double> const d_o = detail::matmul_backward(act.o, w.wo, dx, N, HD, C, dw.wo);
    std::vector<double> dq, dk, dv;
    detail::attention_backward(cfg, act.q, act.k, act.v, act.p, d_o, dq, dk, dv);
    std::vector<double> dh1 = detail::matmul_backward(act.h1, w.wq, dq, N, C, HD, dw.wq);
    std::vector<double> const dh1_k = detail::matmul_backward(act.h1, w.wk, dk, N, C, HD, dw.wk);
    std::vector<double> const dh1_v = detail::matmul_backward(act.h1, w.wv, dv, N, C, HD, dw.wv);
    for (std::size_t i = 0; i < N * C; ++i) dh1[i] += dh1_k[i] + dh1_v[i];
    std::vector<double> const dx_ln1 = detail::layer_norm_backward(dh1, w.ln1_g, act.ln1, N, C, dw.ln1_g, dw.ln1_b);
    for (std::size_t i = 0; i < N * C; ++i) dx[i] += dx_ln1[i];  // now d(loss)/d(x_in)
  }

  // Embeddings: scatter-add into the tokens' rows of wte, sum over the batch into wpe.
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < T; ++t) {
      auto const tok = static_cast<std::size_t>(tokens[b * T + t]);
      for (std::size_t c = 0; c < C; ++c) {
        grads.wte[tok * C + c] += dx[(b * T + t) * C + c];
        grads.wpe[t * C + c] += dx[(b * T + t) * C + c];
      }
    }
  return grads;
}

}  // namespace shardmesh::test::reference
