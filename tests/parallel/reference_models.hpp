// Serial, double-precision references of the Llama-style model and of the
// tests' residual MLP (residual_mlp.hpp): forward passes in plain loops over
// std::vector<double>, and every parameter's gradient by central finite
// differences of the forward pass. They share no code with shardmesh (no
// Kokkos, no MPI, no BLAS, no hand-derived backward that could repeat the
// library's derivation).
//
// Dimension names: V vocabulary, T sequence, C hidden, H query heads, K
// key/value heads (H / K query heads share one), D head size (even), F MLP
// width, L layers, B batch. Tensors are row-major; parameters by name:
//   "wte" [V][C]; per block l, "h<l>." + "ln1_g" [C], "wq" [C][H][D],
//   "wk" [C][K][D], "wv" [C][K][D], "wo" [H][D][C], "ln2_g" [C], "w1" [C][F],
//   "w3" [C][F], "w2" [F][C]; "lnf_g" [C], "whead" [C][V].
//
// The model, with RMS(x; g) = g x / sqrt(mean_c x^2 + eps) per (b, t):
//   x = wte[tokens]
//   for each block:
//     h1 = RMS(x; ln1_g);  q = h1.wq, k = h1.wk, v = h1.wv
//     q, k rotated at position t: for i < D/2, angle t base^(-2i/D),
//       (x_i, x_{i+D/2}) -> (x_i cos - x_{i+D/2} sin, x_{i+D/2} cos + x_i sin)
//     s[b][h][t][u] = q[b][t][h].k[b][u][h / (H/K)] / sqrt(D) for u <= t;
//     p = softmax over u <= t;  o[b][t][h] = sum_u p[b][h][t][u] v[b][u][h / (H/K)]
//     x = x + o.wo
//     h2 = RMS(x; ln2_g);  x = x + (silu(h2.w1) * (h2.w3)).w2,  silu(a) = a / (1 + e^-a)
//   logits = RMS(x; lnf_g).whead
//   loss = mean over the targets that are not padding (-1) of logsumexp(logits) - logits[target]
//
// With E experts, block l with (l + 1) % every == 0 has, in place of the
// SwiGLU MLP ("w1", "w3", "w2"), "router" [C][E], "experts_up" [E][C][F]
// and "experts_down" [E][F][C]: per token, p = softmax(h2.router), the k
// largest (ties to the lower index), gates p_e / (sum of the chosen p),
// x = x + sum over the chosen of gate gelu(h2.up_e).down_e (gelu's tanh
// form); no token dropped. Each of `micro` equal parts of the batch adds to
// the objective (tokens of the part / all tokens) times
//   balance E sum_e f_e P_e + z mean(logsumexp(h2.router)^2)
// over the part's tokens (f_e: e's share of the part's choices; P_e: its
// mean probability).
//
// Finite differences: g = (loss(p + h) - loss(p - h)) / 2h with h = 1e-5.
// The loss is O(1) and smooth: the truncation error is h^2/6 |loss'''| ~
// 1e-11, the rounding error about 1e-16 / h = 1e-11; gradients are good to
// ~1e-10, four orders below what a float model can match.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::test::llama_reference {

struct config {
  std::size_t V = 0, T = 0, C = 0, H = 0, K = 0, D = 0, F = 0, L = 0, B = 0;
  double eps = 1e-5, base = 10000;
  std::size_t E = 0, every = 2, k = 2, micro = 1;  // experts (none while E is 0)
  double balance = 0.01, z = 0;

  [[nodiscard]] bool experts_in(std::size_t l) const { return E > 0 && (l + 1) % every == 0; }
};

using values = std::map<std::string, std::vector<double>>;

// Every parameter's name and shape, in the model's order.
inline std::vector<std::pair<std::string, std::vector<std::size_t>>> shapes(config const& c) {
  std::vector<std::pair<std::string, std::vector<std::size_t>>> out{{"wte", {c.V, c.C}}};
  for (std::size_t l = 0; l < c.L; ++l) {
    std::string const p = "h" + std::to_string(l) + ".";
    out.insert(out.end(), {{p + "ln1_g", {c.C}},
                           {p + "wq", {c.C, c.H, c.D}},
                           {p + "wk", {c.C, c.K, c.D}},
                           {p + "wv", {c.C, c.K, c.D}},
                           {p + "wo", {c.H, c.D, c.C}},
                           {p + "ln2_g", {c.C}}});
    if (c.experts_in(l))
      out.insert(
          out.end(),
          {{p + "router", {c.C, c.E}}, {p + "experts_up", {c.E, c.C, c.F}}, {p + "experts_down", {c.E, c.F, c.C}}});
    else
      out.insert(out.end(), {{p + "w1", {c.C, c.F}}, {p + "w3", {c.C, c.F}}, {p + "w2", {c.F, c.C}}});
  }
  out.insert(out.end(), {{"lnf_g", {c.C}}, {"whead", {c.C, c.V}}});
  return out;
}

// Deterministic values in [-0.5, 0.5) from (seed, stream, index).
inline double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  auto mix = [](std::uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  return static_cast<double>(mix(mix(mix(seed) ^ stream) ^ index) >> 11) * 0x1.0p-53 - 0.5;
}

// Gains near 1, matrices of scale 1/sqrt(fan-in) (embeddings of scale 1).
inline values init(std::vector<std::pair<std::string, std::vector<std::size_t>>> const& shapes, std::uint64_t seed) {
  values out;
  std::uint64_t stream = 0;
  for (auto const& [name, shape] : shapes) {
    std::size_t n = 1;
    for (std::size_t e : shape) n *= e;
    bool const gain = shape.size() == 1;
    double const scale = gain ? 0.4 : name == "wte" ? 1.0 : 2.0 / std::sqrt(static_cast<double>(shape[0]));
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = (gain ? 1.0 : 0.0) + scale * uniform(seed, stream, i);
    out[name] = std::move(v);
    ++stream;
  }
  return out;
}

inline values init(config const& c, std::uint64_t seed) { return init(shapes(c), seed); }

// count token ids below V.
inline std::vector<int> tokens(std::size_t count, std::size_t V, std::uint64_t seed, std::uint64_t salt) {
  std::vector<int> out(count);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<int>((uniform(seed, 1000 + salt, i) + 0.5) * static_cast<double>(V)) % static_cast<int>(V);
  return out;
}
inline std::vector<int> tokens(config const& c, std::uint64_t seed, std::uint64_t salt) {
  return tokens(c.B * c.T, c.V, seed, salt);
}

namespace detail {

using vec = std::vector<double>;

// x [rows][n] normalised in place by RMS with gain g.
inline void rms(vec& x, vec const& g, std::size_t n, double eps) {
  for (std::size_t r = 0; r < x.size() / n; ++r) {
    double squares = 0;
    for (std::size_t j = 0; j < n; ++j) squares += x[r * n + j] * x[r * n + j];
    double const s = 1 / std::sqrt(squares / static_cast<double>(n) + eps);
    for (std::size_t j = 0; j < n; ++j) x[r * n + j] *= s * g[j];
  }
}

// [rows][n] times [n][m].
inline vec product(vec const& a, vec const& w, std::size_t n, std::size_t m) {
  std::size_t const rows = a.size() / n;
  vec out(rows * m, 0.0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) out[r * m + j] += a[r * n + i] * w[i * m + j];
  return out;
}

// x [B][T][heads][D] rotated at each position t.
inline void rotate(vec& x, config const& c, std::size_t heads) {
  std::size_t const half = c.D / 2;
  for (std::size_t b = 0; b < c.B; ++b)
    for (std::size_t t = 0; t < c.T; ++t)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t i = 0; i < half; ++i) {
          double const angle =
              static_cast<double>(t) * std::pow(c.base, -2.0 * static_cast<double>(i) / static_cast<double>(c.D));
          double* row = &x[((b * c.T + t) * heads + h) * c.D];
          double const x1 = row[i], x2 = row[i + half];
          row[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          row[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
}

inline vec attention(vec const& q, vec const& k, vec const& v, config const& c) {
  std::size_t const group = c.H / c.K;
  vec o(c.B * c.T * c.H * c.D, 0.0);
  for (std::size_t b = 0; b < c.B; ++b)
    for (std::size_t h = 0; h < c.H; ++h)
      for (std::size_t t = 0; t < c.T; ++t) {
        std::vector<double> s(t + 1);
        double top = -1e300;
        for (std::size_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (std::size_t d = 0; d < c.D; ++d)
            dot += q[((b * c.T + t) * c.H + h) * c.D + d] * k[((b * c.T + u) * c.K + h / group) * c.D + d];
          s[u] = dot / std::sqrt(static_cast<double>(c.D));
          top = std::max(top, s[u]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - top));
        for (std::size_t u = 0; u <= t; ++u)
          for (std::size_t d = 0; d < c.D; ++d)
            o[((b * c.T + t) * c.H + h) * c.D + d] += s[u] / sum * v[((b * c.T + u) * c.K + h / group) * c.D + d];
      }
  return o;
}

inline double gelu(double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))); }

// Block n's mixture of experts on h [B T][C]: its output, and its auxiliary losses added to aux.
inline vec experts(vec const& h, values const& p, std::string const& n, config const& c, double& aux) {
  std::size_t const rows = h.size() / c.C;
  vec const logits = product(h, p.at(n + "router"), c.C, c.E);
  vec const& up = p.at(n + "experts_up");
  vec const& down = p.at(n + "experts_down");
  vec y(rows * c.C, 0.0), share(c.E, 0.0), mean(c.E, 0.0);
  double z = 0;
  std::size_t const part = rows / c.micro;
  for (std::size_t r = 0; r < rows; ++r) {
    vec prob(c.E);
    double top = -1e300, sum = 0;
    for (std::size_t e = 0; e < c.E; ++e) top = std::max(top, logits[r * c.E + e]);
    for (std::size_t e = 0; e < c.E; ++e) sum += std::exp(logits[r * c.E + e] - top);
    double const lse = top + std::log(sum);
    for (std::size_t e = 0; e < c.E; ++e) prob[e] = std::exp(logits[r * c.E + e] - lse);
    std::vector<std::size_t> chosen;
    double total = 0;
    for (std::size_t j = 0; j < c.k; ++j) {
      std::size_t best = c.E;
      for (std::size_t e = 0; e < c.E; ++e)
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end() && (best == c.E || prob[e] > prob[best]))
          best = e;
      chosen.push_back(best);
      total += prob[best];
    }
    for (std::size_t e : chosen) {
      vec hidden(c.F, 0.0);
      for (std::size_t i = 0; i < c.C; ++i)
        for (std::size_t f = 0; f < c.F; ++f) hidden[f] += h[r * c.C + i] * up[(e * c.C + i) * c.F + f];
      for (std::size_t j = 0; j < c.C; ++j) {
        double o = 0;
        for (std::size_t f = 0; f < c.F; ++f) o += gelu(hidden[f]) * down[(e * c.F + f) * c.C + j];
        y[r * c.C + j] += prob[e] / total * o;
      }
      share[e] += 1.0 / static_cast<double>(part * c.k);
    }
    for (std::size_t e = 0; e < c.E; ++e) mean[e] += prob[e] / static_cast<double>(part);
    z += lse * lse / static_cast<double>(part);
    if ((r + 1) % part == 0) {  // the end of a part: its losses, by its share of the tokens
      double balance = 0;
      for (std::size_t e = 0; e < c.E; ++e) balance += static_cast<double>(c.E) * share[e] * mean[e];
      aux += (c.balance * balance + c.z * z) / static_cast<double>(c.micro);
      share.assign(c.E, 0.0);
      mean.assign(c.E, 0.0);
      z = 0;
    }
  }
  return y;
}

}  // namespace detail

struct forward_result {
  double loss = 0;
  std::vector<double> logits;  // [B][T][V]
  double auxiliary = 0;        // the experts' losses, in the objective beside `loss`
  [[nodiscard]] double objective() const { return loss + auxiliary; }
};

// The final RMS norm, the head and the mean cross-entropy over the targets that are not padding.
inline forward_result head(std::vector<double> x, values const& p, std::vector<int> const& targets, std::size_t C,
                           std::size_t V, double eps) {
  detail::rms(x, p.at("lnf_g"), C, eps);
  forward_result out{0, detail::product(x, p.at("whead"), C, V)};
  std::size_t counted = 0;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] < 0) continue;
    double top = -1e300;
    for (std::size_t j = 0; j < V; ++j) top = std::max(top, out.logits[r * V + j]);
    double sum = 0;
    for (std::size_t j = 0; j < V; ++j) sum += std::exp(out.logits[r * V + j] - top);
    out.loss += top + std::log(sum) - out.logits[r * V + static_cast<std::size_t>(targets[r])];
    ++counted;
  }
  out.loss /= static_cast<double>(counted);
  return out;
}

inline forward_result forward(config const& c, values const& p, std::vector<int> const& tokens,
                              std::vector<int> const& targets) {
  using namespace detail;
  std::size_t const rows = c.B * c.T;
  vec x(rows * c.C);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < c.C; ++j) x[r * c.C + j] = p.at("wte")[static_cast<std::size_t>(tokens[r]) * c.C + j];
  double auxiliary = 0;
  for (std::size_t l = 0; l < c.L; ++l) {
    std::string const n = "h" + std::to_string(l) + ".";
    vec h1 = x;
    rms(h1, p.at(n + "ln1_g"), c.C, c.eps);
    vec q = product(h1, p.at(n + "wq"), c.C, c.H * c.D);
    vec k = product(h1, p.at(n + "wk"), c.C, c.K * c.D);
    vec const v = product(h1, p.at(n + "wv"), c.C, c.K * c.D);
    rotate(q, c, c.H);
    rotate(k, c, c.K);
    vec const a = product(attention(q, k, v, c), p.at(n + "wo"), c.H * c.D, c.C);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += a[i];
    vec h2 = x;
    rms(h2, p.at(n + "ln2_g"), c.C, c.eps);
    if (c.experts_in(l)) {
      vec const m = experts(h2, p, n, c, auxiliary);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += m[i];
      continue;
    }
    vec gate = product(h2, p.at(n + "w1"), c.C, c.F);
    vec const up = product(h2, p.at(n + "w3"), c.C, c.F);
    for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    vec const m = product(gate, p.at(n + "w2"), c.F, c.C);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += m[i];
  }
  forward_result out = head(x, p, targets, c.C, c.V, c.eps);
  out.auxiliary = auxiliary;
  return out;
}

// Every parameter's gradient by central differences of loss(p).
template <class Loss>
values gradients(values p, Loss const& loss) {
  constexpr double h = 1e-5;
  values out;
  for (auto& [name, v] : p) {
    std::vector<double>& g = out[name];
    g.resize(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      double const keep = v[i];
      v[i] = keep + h;
      double const up = loss(p);
      v[i] = keep - h;
      double const down = loss(p);
      v[i] = keep;
      g[i] = (up - down) / (2 * h);
    }
  }
  return out;
}

inline values gradients(config const& c, values const& p, std::vector<int> const& tokens,
                        std::vector<int> const& targets) {
  return gradients(p, [&](values const& at) { return forward(c, at, tokens, targets).objective(); });
}

}  // namespace shardmesh::test::llama_reference

// The residual MLP: x = wte[tokens]; per block l, x = x + gelu(RMS(x; ln_g) w1) w2 with
// gelu(m) = 0.5 m (1 + tanh(sqrt(2/pi) (m + 0.044715 m^3))), w1 [C][widths[l]]; then the Llama's head.
namespace shardmesh::test::residual_reference {

using llama_reference::values;

struct config {
  std::size_t V = 0, T = 0, C = 0, B = 0;
  std::vector<std::size_t> widths;
  double eps = 1e-5;
};

inline std::vector<std::pair<std::string, std::vector<std::size_t>>> shapes(config const& c) {
  std::vector<std::pair<std::string, std::vector<std::size_t>>> out{{"wte", {c.V, c.C}}};
  for (std::size_t l = 0; l < c.widths.size(); ++l) {
    std::string const p = "h" + std::to_string(l) + ".";
    out.insert(out.end(), {{p + "ln_g", {c.C}}, {p + "w1", {c.C, c.widths[l]}}, {p + "w2", {c.widths[l], c.C}}});
  }
  out.insert(out.end(), {{"lnf_g", {c.C}}, {"whead", {c.C, c.V}}});
  return out;
}

inline llama_reference::forward_result forward(config const& c, values const& p, std::vector<int> const& tokens,
                                               std::vector<int> const& targets) {
  using namespace llama_reference::detail;
  std::vector<double> x(tokens.size() * c.C);
  for (std::size_t r = 0; r < tokens.size(); ++r)
    for (std::size_t j = 0; j < c.C; ++j) x[r * c.C + j] = p.at("wte")[static_cast<std::size_t>(tokens[r]) * c.C + j];
  for (std::size_t l = 0; l < c.widths.size(); ++l) {
    std::string const n = "h" + std::to_string(l) + ".";
    std::vector<double> h = x;
    rms(h, p.at(n + "ln_g"), c.C, c.eps);
    std::vector<double> m = product(h, p.at(n + "w1"), c.C, c.widths[l]);
    for (double& v : m) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    std::vector<double> const y = product(m, p.at(n + "w2"), c.widths[l], c.C);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  return llama_reference::head(std::move(x), p, targets, c.C, c.V, c.eps);
}

}  // namespace shardmesh::test::residual_reference
