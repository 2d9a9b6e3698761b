#pragma once
// A mixture of experts' router on one rank's tokens, on the host (the
// exchange needs the choices there anyway: they decide every count).
// From the router's probabilities p = softmax(logits) [N, E]:
//
//   choose       each token's top k experts (ties to the lower index) and
//                their gates, renormalised over the chosen: g_j = p_(e_j) / Z,
//                Z = sum over the chosen of p (Mixtral's rule; with k = 1 the
//                gate is 1 and the router learns from the auxiliary losses)
//   losses       the load-balancing loss of Switch/GShard, E sum_e f_e P_e,
//                f_e the share of the N k choices that went to e and P_e the
//                mean probability of e (f is counted, not differentiated), and
//                the router z-loss, the mean over tokens of logsumexp(logits)^2
//   backward     d logits from the gates' gradient and the two losses'
//                weights, through the renormalisation and the softmax
//
// All in double; N the rank's tokens (each rank balances its own tokens, as
// Switch does per core).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace shardmesh::ops::local {

struct routing {
  std::size_t tokens = 0, experts = 0, k = 0;
  std::vector<int> choice;           // [N, k]
  std::vector<double> gate;          // [N, k]
  std::vector<double> probability;   // [N, E]
  std::vector<double> log_sum_exp;   // [N]
  std::vector<double> choice_share;  // f_e [E]
  double balance_loss = 0, z_loss = 0;
};

// logits [N, E] row-major.
inline routing route_tokens(std::vector<double> const& logits, std::size_t N, std::size_t E, std::size_t k) {
  routing r{N,
            E,
            k,
            std::vector<int>(N * k),
            std::vector<double>(N * k),
            std::vector<double>(N * E),
            std::vector<double>(N),
            std::vector<double>(E, 0.0)};
  std::vector<double> mean(E, 0.0);
  for (std::size_t n = 0; n < N; ++n) {
    double const* z = &logits[n * E];
    double const top = *std::max_element(z, z + E);
    double sum = 0;
    for (std::size_t e = 0; e < E; ++e) sum += std::exp(z[e] - top);
    r.log_sum_exp[n] = top + std::log(sum);
    double* p = &r.probability[n * E];
    for (std::size_t e = 0; e < E; ++e) {
      p[e] = std::exp(z[e] - r.log_sum_exp[n]);
      mean[e] += p[e] / static_cast<double>(N);
    }
    double chosen = 0;
    for (std::size_t j = 0; j < k; ++j) {
      std::size_t best = E;
      for (std::size_t e = 0; e < E; ++e) {
        bool const taken =
            std::find(&r.choice[n * k], &r.choice[n * k] + j, static_cast<int>(e)) != &r.choice[n * k] + j;
        if (!taken && (best == E || p[e] > p[best])) best = e;
      }
      r.choice[n * k + j] = static_cast<int>(best);
      chosen += p[best];
      r.choice_share[best] += 1.0 / static_cast<double>(N * k);
    }
    for (std::size_t j = 0; j < k; ++j) r.gate[n * k + j] = p[static_cast<std::size_t>(r.choice[n * k + j])] / chosen;
    r.z_loss += r.log_sum_exp[n] * r.log_sum_exp[n] / static_cast<double>(N);
  }
  for (std::size_t e = 0; e < E; ++e) r.balance_loss += static_cast<double>(E) * r.choice_share[e] * mean[e];
  return r;
}

// d logits [N, E] of: the gates' gradient d_gate [N, k], plus `balance`
// times the load-balancing loss and `z` times the z-loss.
inline std::vector<double> route_backward(routing const& r, std::vector<double> const& d_gate, double balance,
                                          double z) {
  std::size_t const N = r.tokens, E = r.experts, k = r.k;
  std::vector<double> d_logits(N * E), dp(E);
  for (std::size_t n = 0; n < N; ++n) {
    double const* p = &r.probability[n * E];
    // Through the renormalisation g_j = p_j / Z: dp_j = (dg_j - sum_i g_i dg_i) / Z.
    double chosen = 0, weighted = 0;
    for (std::size_t j = 0; j < k; ++j) {
      chosen += p[static_cast<std::size_t>(r.choice[n * k + j])];
      weighted += r.gate[n * k + j] * d_gate[n * k + j];
    }
    for (std::size_t e = 0; e < E; ++e)
      dp[e] = balance * static_cast<double>(E) * r.choice_share[e] / static_cast<double>(N);  // d(E sum f P)/dp
    for (std::size_t j = 0; j < k; ++j)
      dp[static_cast<std::size_t>(r.choice[n * k + j])] += (d_gate[n * k + j] - weighted) / chosen;
    // Through the softmax, and the z-loss's d(lse^2)/dz = 2 lse p.
    double dot = 0;
    for (std::size_t e = 0; e < E; ++e) dot += p[e] * dp[e];
    for (std::size_t e = 0; e < E; ++e)
      d_logits[n * E + e] = p[e] * (dp[e] - dot) + z * 2 * r.log_sum_exp[n] * p[e] / static_cast<double>(N);
  }
  return d_logits;
}

}  // namespace shardmesh::ops::local
