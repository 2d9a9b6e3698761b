// The serial reference GPT checked on its own: backward against central finite differences of the
// loss for a sample of elements of every parameter, forward against its documented formulas, and
// the properties the parallel tests rely on (causality, per-position targets, untrained loss,
// deterministic initialization).
#include "reference_gpt.hpp"

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <set>
#include <string>
#include <vector>

namespace ref = shardmesh::test::reference;

namespace {

// Tiny, and chosen so that H*D != C and no size divides another evenly.
constexpr ref::config tiny{.V = 11, .T = 5, .C = 8, .H = 3, .D = 3, .F = 10, .L = 2, .B = 2};

constexpr std::uint64_t param_seed = 1234;
constexpr std::uint64_t token_seed = 99;
constexpr std::uint64_t input_salt = 0;
constexpr std::uint64_t target_salt = 1;

struct named_tensor {
  std::string name;
  std::vector<double>* values;
};

std::vector<named_tensor> list_tensors(ref::config const& cfg, ref::parameters& params) {
  std::vector<named_tensor> out;
  ref::for_each_parameter(cfg, params,
                          [&](std::string const& name, std::vector<double>& values, std::vector<std::size_t> const&) {
                            out.push_back({name, &values});
                          });
  return out;
}

// Up to 6 distinct element indices of a parameter, from its gradient grad: the first, the last, the
// one with the largest |gradient| (so that a parameter whose sampled gradients are all zero, such
// as rows of wte for tokens absent from the batch, cannot pass vacuously) and three spread in
// between at deterministic, unevenly spaced positions.
std::vector<std::size_t> sample_indices(std::vector<double> const& grad) {
  std::size_t const n = grad.size();
  auto const largest =
      std::max_element(grad.begin(), grad.end(), [](double x, double y) { return std::abs(x) < std::abs(y); });
  std::set<std::size_t> picked{0, n - 1, static_cast<std::size_t>(largest - grad.begin())};
  for (std::size_t j = 1; j <= 3; ++j) picked.insert((j * 7 * n / 31 + j * j) % n);
  return {picked.begin(), picked.end()};
}

// Compares backward with central finite differences of the loss for a sample of elements of every
// parameter of the model cfg.
void check_backward_against_finite_differences(ref::config const& cfg) {
  ref::parameters params = ref::init_parameters(cfg, param_seed);
  std::vector<int> const tokens = ref::make_tokens(cfg, token_seed, input_salt);
  std::vector<int> const targets = ref::make_tokens(cfg, token_seed, target_salt);

  ref::forward_result const fwd = ref::forward(cfg, params, tokens, targets);
  ref::gradients grads = ref::backward(cfg, params, fwd, tokens, targets);

  // Central differences with step h = 1e-6. The truncation error, about h^2/6 * |f'''|, is ~1e-13;
  // the rounding error, (a few ulps of a loss near log(V) ~ 2.5) / (2h), is ~1e-9 (over every
  // element of the tiny model it peaks at 7e-10). So allow 1e-6 relative to |g| with an absolute
  // floor of 1e-8, that is 1e-6 * max(1e-2, |g|): a safe margin over that noise, even where another
  // compiler rounds differently, yet far below what a wrong or missing term of the backward pass
  // leaves (an error of the order of the gradient itself).
  double const h = 1e-6;
  auto const tolerance = [](double g) { return 1e-6 * std::max(1e-2, std::abs(g)); };

  std::vector<named_tensor> const param_list = list_tensors(cfg, params);
  std::vector<named_tensor> const grad_list = list_tensors(cfg, grads);
  REQUIRE(param_list.size() == 2 + 10 * cfg.L + 3);
  REQUIRE(grad_list.size() == param_list.size());

  std::size_t checked = 0;
  double worst_ratio = 0.0;  // max |fd - g| / tolerance(g)
  for (std::size_t p = 0; p < param_list.size(); ++p) {
    std::vector<double>& values = *param_list[p].values;
    std::vector<double> const& grad = *grad_list[p].values;
    REQUIRE(grad.size() == values.size());
    double largest_sampled = 0.0;  // so that no parameter passes only by having zero gradients
    for (std::size_t i : sample_indices(grad)) {
      double const saved = values[i];
      values[i] = saved + h;
      double const loss_plus = ref::forward(cfg, params, tokens, targets).loss;
      values[i] = saved - h;
      double const loss_minus = ref::forward(cfg, params, tokens, targets).loss;
      values[i] = saved;
      double const fd = (loss_plus - loss_minus) / (2.0 * h);
      double const error = std::abs(fd - grad[i]);
      worst_ratio = std::max(worst_ratio, error / tolerance(grad[i]));
      INFO(param_list[p].name << "[" << i << "]: backward " << grad[i] << ", finite difference " << fd << ", error "
                              << error);
      CHECK(error <= tolerance(grad[i]));
      largest_sampled = std::max(largest_sampled, std::abs(grad[i]));
      ++checked;
    }
    INFO(param_list[p].name << ": largest sampled gradient " << largest_sampled);
    CHECK(largest_sampled > 1e-4);
  }
  INFO("checked " << checked << " elements; worst error / tolerance " << worst_ratio);
  CHECK(checked >= 4 * param_list.size());
  CHECK(worst_ratio <= 1.0);
}

}  // namespace

TEST_CASE("reference GPT backward matches central finite differences for every parameter", "[reference_gpt]") {
  check_backward_against_finite_differences(tiny);
}

TEST_CASE("reference GPT backward matches finite differences with one layer, one sequence and H*D > C",
          "[reference_gpt]") {
  check_backward_against_finite_differences({.V = 13, .T = 7, .C = 6, .H = 2, .D = 4, .F = 9, .L = 1, .B = 1});
}

// Finite differences only show that backward is the derivative of forward; this checks forward
// itself against the documented formulas, stage by stage (each stage from the stored result of the
// one before it), written with the full multi-index layouts rather than forward's flattened
// matrix products.
TEST_CASE("reference GPT forward activations follow the documented formulas", "[reference_gpt]") {
  ref::config const& cfg = tiny;
  std::size_t const V = cfg.V, T = cfg.T, C = cfg.C, H = cfg.H, D = cfg.D, F = cfg.F, B = cfg.B;
  ref::parameters const params = ref::init_parameters(cfg, param_seed);
  std::vector<int> const tokens = ref::make_tokens(cfg, token_seed, input_salt);
  std::vector<int> const targets = ref::make_tokens(cfg, token_seed, target_salt);
  ref::forward_result const fwd = ref::forward(cfg, params, tokens, targets);
  REQUIRE(fwd.blocks.size() == cfg.L);

  double const tol = 1e-12;  // the values are O(1); only the order of the sums differs
  std::size_t mismatches = 0;
  auto const expect = [&](double actual, double expected) {
    if (!(std::abs(actual - expected) <= tol)) ++mismatches;
  };
  // x [B][T][C] -> LN(x; gain, bias), straight from the definition.
  auto const layer_norm = [&](std::vector<double> const& x, std::vector<double> const& gain,
                              std::vector<double> const& bias) {
    std::vector<double> y(B * T * C);
    for (std::size_t bt = 0; bt < B * T; ++bt) {
      double mu = 0.0, var = 0.0;
      for (std::size_t c = 0; c < C; ++c) mu += x[bt * C + c] / static_cast<double>(C);
      for (std::size_t c = 0; c < C; ++c) var += std::pow(x[bt * C + c] - mu, 2) / static_cast<double>(C);
      for (std::size_t c = 0; c < C; ++c)
        y[bt * C + c] = (x[bt * C + c] - mu) / std::sqrt(var + cfg.eps) * gain[c] + bias[c];
    }
    return y;
  };

  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t c = 0; c < C; ++c)
        expect(fwd.blocks[0].x_in[(b * T + t) * C + c],
               params.wte[static_cast<std::size_t>(tokens[b * T + t]) * C + c] + params.wpe[t * C + c]);

  for (std::size_t l = 0; l < cfg.L; ++l) {
    ref::block_parameters const& w = params.blocks[l];
    ref::block_activations const& act = fwd.blocks[l];
    std::vector<double> const h1 = layer_norm(act.x_in, w.ln1_g, w.ln1_b);
    for (std::size_t i = 0; i < h1.size(); ++i) expect(act.h1[i], h1[i]);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t h = 0; h < H; ++h)
          for (std::size_t d = 0; d < D; ++d) {
            double q = 0.0, k = 0.0, v = 0.0;
            for (std::size_t c = 0; c < C; ++c) {
              double const x = act.h1[(b * T + t) * C + c];
              q += x * w.wq[(c * H + h) * D + d];
              k += x * w.wk[(c * H + h) * D + d];
              v += x * w.wv[(c * H + h) * D + d];
            }
            std::size_t const i = ((b * T + t) * H + h) * D + d;
            expect(act.q[i], q);
            expect(act.k[i], k);
            expect(act.v[i], v);
          }
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t t = 0; t < T; ++t) {
          std::vector<double> e(t + 1);  // exp(s[u]) for u <= t; the logits are small
          double sum = 0.0;
          for (std::size_t u = 0; u <= t; ++u) {
            double s = 0.0;
            for (std::size_t d = 0; d < D; ++d)
              s += act.q[((b * T + t) * H + h) * D + d] * act.k[((b * T + u) * H + h) * D + d];
            e[u] = std::exp(s / std::sqrt(static_cast<double>(D)));
            sum += e[u];
          }
          for (std::size_t u = 0; u < T; ++u) expect(act.p[((b * H + h) * T + t) * T + u], u <= t ? e[u] / sum : 0.0);
          for (std::size_t d = 0; d < D; ++d) {
            double o = 0.0;
            for (std::size_t u = 0; u < T; ++u)
              o += act.p[((b * H + h) * T + t) * T + u] * act.v[((b * T + u) * H + h) * D + d];
            expect(act.o[((b * T + t) * H + h) * D + d], o);
          }
        }
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t c = 0; c < C; ++c) {
          double a = 0.0;
          for (std::size_t h = 0; h < H; ++h)
            for (std::size_t d = 0; d < D; ++d) a += act.o[((b * T + t) * H + h) * D + d] * w.wo[(h * D + d) * C + c];
          expect(act.x_mid[(b * T + t) * C + c], act.x_in[(b * T + t) * C + c] + a);
        }
    std::vector<double> const h2 = layer_norm(act.x_mid, w.ln2_g, w.ln2_b);
    for (std::size_t i = 0; i < h2.size(); ++i) expect(act.h2[i], h2[i]);
    for (std::size_t bt = 0; bt < B * T; ++bt)
      for (std::size_t f = 0; f < F; ++f) {
        double m = 0.0;
        for (std::size_t c = 0; c < C; ++c) m += act.h2[bt * C + c] * w.w1[c * F + f];
        expect(act.m[bt * F + f], m);
        double const gelu = 0.5 * m * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (m + 0.044715 * m * m * m)));
        expect(act.g[bt * F + f], gelu);
      }
    std::vector<double> const& next = l + 1 < cfg.L ? fwd.blocks[l + 1].x_in : fwd.x_out;
    for (std::size_t bt = 0; bt < B * T; ++bt)
      for (std::size_t c = 0; c < C; ++c) {
        double y = 0.0;
        for (std::size_t f = 0; f < F; ++f) y += act.g[bt * F + f] * w.w2[f * C + c];
        expect(next[bt * C + c], act.x_mid[bt * C + c] + y);
      }
  }

  std::vector<double> const hf = layer_norm(fwd.x_out, params.lnf_g, params.lnf_b);
  for (std::size_t i = 0; i < hf.size(); ++i) expect(fwd.hf[i], hf[i]);
  double loss = 0.0;
  for (std::size_t bt = 0; bt < B * T; ++bt) {
    double sum_exp = 0.0;
    for (std::size_t v = 0; v < V; ++v) {
      double logit = 0.0;
      for (std::size_t c = 0; c < C; ++c) logit += fwd.hf[bt * C + c] * params.whead[c * V + v];
      expect(fwd.logits[bt * V + v], logit);
      sum_exp += std::exp(fwd.logits[bt * V + v]);
    }
    for (std::size_t v = 0; v < V; ++v) {
      double const onehot = v == static_cast<std::size_t>(targets[bt]) ? 1.0 : 0.0;
      expect(fwd.dlogits[bt * V + v],
             (std::exp(fwd.logits[bt * V + v]) / sum_exp - onehot) / static_cast<double>(B * T));
    }
    loss +=
        (std::log(sum_exp) - fwd.logits[bt * V + static_cast<std::size_t>(targets[bt])]) / static_cast<double>(B * T);
  }
  expect(fwd.loss, loss);
  CHECK(mismatches == 0);
}

TEST_CASE("an untrained reference GPT's loss is close to log(V)", "[reference_gpt]") {
  ref::parameters const params = ref::init_parameters(tiny, param_seed);
  ref::forward_result const fwd = ref::forward(tiny, params, ref::make_tokens(tiny, token_seed, input_salt),
                                               ref::make_tokens(tiny, token_seed, target_salt));
  INFO("loss " << fwd.loss << ", log(V) " << std::log(static_cast<double>(tiny.V)));
  CHECK(std::abs(fwd.loss - std::log(static_cast<double>(tiny.V))) < 0.5);
  REQUIRE(fwd.logits.size() == tiny.B * tiny.T * tiny.V);
  // d(loss)/d(logits) is (softmax - onehot) / (B*T): every row sums to zero.
  for (std::size_t n = 0; n < tiny.B * tiny.T; ++n) {
    double sum = 0.0;
    for (std::size_t v = 0; v < tiny.V; ++v) sum += fwd.dlogits[n * tiny.V + v];
    CHECK(std::abs(sum) < 1e-15);
  }
}

TEST_CASE("the reference GPT is causal", "[reference_gpt]") {
  ref::parameters const params = ref::init_parameters(tiny, param_seed);
  std::vector<int> tokens = ref::make_tokens(tiny, token_seed, input_salt);
  std::vector<int> const targets = ref::make_tokens(tiny, token_seed, target_salt);
  ref::forward_result const before = ref::forward(tiny, params, tokens, targets);

  // Attention probabilities: exactly zero above the diagonal, rows summing to one.
  for (ref::block_activations const& act : before.blocks)
    for (std::size_t row = 0; row < tiny.B * tiny.H * tiny.T; ++row) {
      std::size_t const t = row % tiny.T;
      double sum = 0.0;
      for (std::size_t u = 0; u < tiny.T; ++u) {
        double const p = act.p[row * tiny.T + u];
        if (u > t) CHECK(p == 0.0);
        sum += p;
      }
      CHECK(std::abs(sum - 1.0) < 1e-14);
    }

  // Change one token of the second sequence: only that sequence's logits at and after it change.
  std::size_t const b0 = 1, t0 = 2;
  tokens[b0 * tiny.T + t0] = (tokens[b0 * tiny.T + t0] + 1) % static_cast<int>(tiny.V);
  ref::forward_result const after = ref::forward(tiny, params, tokens, targets);
  for (std::size_t b = 0; b < tiny.B; ++b)
    for (std::size_t t = 0; t < tiny.T; ++t) {
      bool same = true;
      for (std::size_t v = 0; v < tiny.V; ++v)
        same = same && before.logits[(b * tiny.T + t) * tiny.V + v] == after.logits[(b * tiny.T + t) * tiny.V + v];
      INFO("b " << b << ", t " << t);
      CHECK(same == (b != b0 || t < t0));
    }
}

TEST_CASE("a reference GPT target affects only its own position's loss term", "[reference_gpt]") {
  ref::parameters const params = ref::init_parameters(tiny, param_seed);
  std::vector<int> const tokens = ref::make_tokens(tiny, token_seed, input_salt);
  std::vector<int> targets = ref::make_tokens(tiny, token_seed, target_salt);
  ref::forward_result const before = ref::forward(tiny, params, tokens, targets);

  std::size_t const n0 = 1 * tiny.T + 3;  // (b, t) = (1, 3)
  auto const old_target = static_cast<std::size_t>(targets[n0]);
  auto const new_target = (old_target + 4) % tiny.V;
  targets[n0] = static_cast<int>(new_target);
  ref::forward_result const after = ref::forward(tiny, params, tokens, targets);

  CHECK(after.logits == before.logits);
  for (std::size_t n = 0; n < tiny.B * tiny.T; ++n) {
    bool same = true;
    for (std::size_t v = 0; v < tiny.V; ++v)
      same = same && before.dlogits[n * tiny.V + v] == after.dlogits[n * tiny.V + v];
    INFO("row " << n);
    CHECK(same == (n != n0));
  }
  double const expected_change = (before.logits[n0 * tiny.V + old_target] - before.logits[n0 * tiny.V + new_target]) /
                                 static_cast<double>(tiny.B * tiny.T);
  CHECK(std::abs((after.loss - before.loss) - expected_change) < 1e-14);
}

TEST_CASE("reference GPT parameters and tokens are deterministic", "[reference_gpt]") {
  ref::parameters a = ref::init_parameters(tiny, param_seed);
  ref::parameters b = ref::init_parameters(tiny, param_seed);
  ref::parameters c = ref::init_parameters(tiny, param_seed + 1);
  std::vector<named_tensor> const la = list_tensors(tiny, a);
  std::vector<named_tensor> const lb = list_tensors(tiny, b);
  std::vector<named_tensor> const lc = list_tensors(tiny, c);
  for (std::size_t p = 0; p < la.size(); ++p) {
    INFO(la[p].name);
    CHECK(*la[p].values == *lb[p].values);
    CHECK(*la[p].values != *lc[p].values);
    // Ranges: gains in [0.9, 1.1), biases in [-0.1, 0.1), embeddings in [-0.5, 0.5), matrices
    // within 0.5/sqrt(fan_in) <= 0.5/sqrt(3).
    double lo = 0.0, hi = 0.0;
    std::string const& name = la[p].name;
    if (name.ends_with("_g")) {
      lo = 0.9, hi = 1.1;
    } else if (name.ends_with("_b")) {
      lo = -0.1, hi = 0.1;
    } else {
      lo = -0.5, hi = 0.5;
    }
    for (double value : *la[p].values) CHECK((value >= lo && value < hi));
  }
  // The hash's values are exact (integer mixing, then a 53-bit fraction), so they are pinned.
  CHECK(a.wte[0] == -0x1.6a496f6c7352cp-3);
  // Different parameters draw different streams.
  CHECK(a.blocks[0].wq != a.blocks[0].wk);
  CHECK(a.blocks[0].ln1_b != a.blocks[1].ln1_b);

  std::vector<int> const inputs = ref::make_tokens(tiny, token_seed, input_salt);
  std::vector<int> const targets = ref::make_tokens(tiny, token_seed, target_salt);
  REQUIRE(inputs.size() == tiny.B * tiny.T);
  CHECK(inputs == ref::make_tokens(tiny, token_seed, input_salt));
  CHECK(inputs == std::vector<int>{2, 0, 6, 9, 3, 6, 0, 7, 9, 9});
  CHECK(targets == std::vector<int>{4, 2, 6, 0, 4, 2, 2, 4, 10, 3});
  CHECK(inputs != targets);
  for (int token : inputs) CHECK((token >= 0 && token < static_cast<int>(tiny.V)));
  for (int token : targets) CHECK((token >= 0 && token < static_cast<int>(tiny.V)));
}
