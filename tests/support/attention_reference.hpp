#pragma once
// Attention of queries over keys and values, all at once, in double with
// plain loops: the reference of the blockwise and context-parallel
// attention tests. [B, T, heads, D] row-major; query row i at position
// q0 + i, key j at k0 + j; causal hides a key after its query. A row that
// sees no key: output 0, log-sum-exp -inf, no gradient.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace shardmesh::test::attention {

using values = std::vector<double>;
inline constexpr double none = -std::numeric_limits<double>::infinity();

struct shape {
  std::size_t B, Tq, H, Hk, D, Tk;
};

// [B, T, heads, D] row-major.
inline std::size_t at(std::size_t T, std::size_t heads, std::size_t D, std::size_t b, std::size_t t, std::size_t h,
                      std::size_t d) {
  return ((b * T + t) * heads + h) * D + d;
}

struct result {
  values out, lse, dq, dk, dv;
};

// Attention over every key at once, in double: key j at position k0 + j, query i at q0 + i.
inline result direct(shape const& s, values const& q, values const& k, values const& v, values const& dout,
                     std::size_t q0, std::size_t k0, bool causal, double scale) {
  result r{values(q.size()), values(s.B * s.Tq * s.H, none), values(q.size()), values(k.size()), values(v.size())};
  std::size_t const group = s.H / s.Hk;
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t i = 0; i < s.Tq; ++i)
      for (std::size_t h = 0; h < s.H; ++h) {
        std::size_t const hk = h / group;
        std::size_t const seen = !causal ? s.Tk : q0 + i < k0 ? 0 : std::min(s.Tk, q0 + i - k0 + 1);
        if (seen == 0) continue;
        values score(seen);
        for (std::size_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (std::size_t d = 0; d < s.D; ++d)
            dot += q[at(s.Tq, s.H, s.D, b, i, h, d)] * k[at(s.Tk, s.Hk, s.D, b, j, hk, d)];
          score[j] = scale * dot;
        }
        double const top = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (double x : score) total += std::exp(x - top);
        r.lse[(b * s.Tq + i) * s.H + h] = top + std::log(total);
        values p(seen), dp(seen);
        double delta = 0;
        for (std::size_t j = 0; j < seen; ++j) {
          p[j] = std::exp(score[j] - top) / total;
          for (std::size_t d = 0; d < s.D; ++d) {
            r.out[at(s.Tq, s.H, s.D, b, i, h, d)] += p[j] * v[at(s.Tk, s.Hk, s.D, b, j, hk, d)];
            dp[j] += dout[at(s.Tq, s.H, s.D, b, i, h, d)] * v[at(s.Tk, s.Hk, s.D, b, j, hk, d)];
          }
          delta += p[j] * dp[j];
        }
        for (std::size_t j = 0; j < seen; ++j) {
          double const ds = p[j] * (dp[j] - delta);
          for (std::size_t d = 0; d < s.D; ++d) {
            r.dq[at(s.Tq, s.H, s.D, b, i, h, d)] += scale * ds * k[at(s.Tk, s.Hk, s.D, b, j, hk, d)];
            r.dk[at(s.Tk, s.Hk, s.D, b, j, hk, d)] += scale * ds * q[at(s.Tq, s.H, s.D, b, i, h, d)];
            r.dv[at(s.Tk, s.Hk, s.D, b, j, hk, d)] += p[j] * dout[at(s.Tq, s.H, s.D, b, i, h, d)];
          }
        }
      }
  return r;
}

}  // namespace shardmesh::test::attention
