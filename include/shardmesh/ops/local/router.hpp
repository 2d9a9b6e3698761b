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
// All in double. The losses are over a group of ranks' tokens (a layer's:
// every rank that holds some of its batch), so that they do not depend on
// how the batch is split: route_tokens sums this rank's part into
// `totals`, the caller sums `totals` over the group, and balance() makes
// the losses from the sums.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace shardmesh::ops::local {

struct routing {
  std::size_t tokens = 0, experts = 0, k = 0;
  std::vector<int> choice;          // [N, k]
  std::vector<double> gate;         // [N, k]
  std::vector<double> probability;  // [N, E]
  std::vector<double> log_sum_exp;  // [N]
  // Sums over the tokens [2E + 2]: choices of each expert, probabilities of
  // each expert, logsumexp^2, tokens. This rank's, then the group's.
  std::vector<double> totals;
  std::vector<double> choice_share;  // f_e [E], over the group
  double balance_loss = 0, z_loss = 0;
};

// logits [N, E] row-major: the choices, gates and this rank's totals.
inline routing route_tokens(std::vector<double> const& logits, std::size_t N, std::size_t E, std::size_t k) {
  routing r{N,
            E,
            k,
            std::vector<int>(N * k),
            std::vector<double>(N * k),
            std::vector<double>(N * E),
            std::vector<double>(N),
            std::vector<double>(2 * E + 2, 0.0),
            {}};
  for (std::size_t n = 0; n < N; ++n) {
    double const* z = &logits[n * E];
    double const top = *std::max_element(z, z + E);
    double sum = 0;
    for (std::size_t e = 0; e < E; ++e) sum += std::exp(z[e] - top);
    r.log_sum_exp[n] = top + std::log(sum);
    double* p = &r.probability[n * E];
    for (std::size_t e = 0; e < E; ++e) {
      p[e] = std::exp(z[e] - r.log_sum_exp[n]);
      r.totals[E + e] += p[e];
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
      r.totals[best] += 1;
    }
    for (std::size_t j = 0; j < k; ++j) r.gate[n * k + j] = p[static_cast<std::size_t>(r.choice[n * k + j])] / chosen;
    r.totals[2 * E] += r.log_sum_exp[n] * r.log_sum_exp[n];
  }
  r.totals[2 * E + 1] = static_cast<double>(N);
  return r;
}

// The losses, from r.totals summed over the group (as route_tokens left them on one rank).
inline void balance(routing& r) {
  std::size_t const E = r.experts;
  double const tokens = r.totals[2 * E + 1];
  r.choice_share.assign(E, 0.0);
  r.balance_loss = r.z_loss = 0;
  if (tokens == 0) return;
  for (std::size_t e = 0; e < E; ++e) {
    r.choice_share[e] = r.totals[e] / (tokens * static_cast<double>(r.k));
    r.balance_loss += static_cast<double>(E) * r.choice_share[e] * r.totals[E + e] / tokens;
  }
  r.z_loss = r.totals[2 * E] / tokens;
}

// d logits [N, E] of: the gates' gradient d_gate [N, k], plus `balance`
// times the load-balancing loss and `z` times the z-loss.
inline std::vector<double> route_backward(routing const& r, std::vector<double> const& d_gate, double balance,
                                          double z) {
  std::size_t const N = r.tokens, E = r.experts, k = r.k;
  double const group = r.totals[2 * E + 1];  // the losses' means are over the group's tokens
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
      dp[e] = balance * static_cast<double>(E) * r.choice_share[e] / group;  // d(E sum f P)/dp
    for (std::size_t j = 0; j < k; ++j)
      dp[static_cast<std::size_t>(r.choice[n * k + j])] += (d_gate[n * k + j] - weighted) / chosen;
    // Through the softmax, and the z-loss's d(lse^2)/dz = 2 lse p.
    double dot = 0;
    for (std::size_t e = 0; e < E; ++e) dot += p[e] * dp[e];
    for (std::size_t e = 0; e < E; ++e)
      d_logits[n * E + e] = p[e] * (dp[e] - dot) + z * 2 * r.log_sum_exp[n] * p[e] / group;
  }
  return d_logits;
}

}  // namespace shardmesh::ops::local
