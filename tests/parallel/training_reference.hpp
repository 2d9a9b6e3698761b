#pragma once
// The serial side of the training tests: the reference GPT trained on the
// whole global batch for a few steps with its own optimizers (written here
// from their definitions) and global-norm clipping, the batches of each
// step, and the comparison of a distributed run's history against it.
// Beside SGD and AdamW, Adagrad stands for a user's own update rule.
//
// Tolerance. After three steps the parameters agree within 1e-5 absolute
// (they are O(1)). The float gradients carry absolute rounding errors dg of
// about 1e-9 (sums of O(1e-2) terms rounded at 6e-8). AdamW's step moves an
// element by lr m/(sqrt(v)+eps), whose sensitivity to g is at most
// lr/eps (for g near 0): with lr = 1e-2 and eps = 1e-4 an error of at most
// ~1e-7 per step, ~3e-7 after three, well below 1e-5; a wrong reduction, a
// gradient counted twice or a shard updated twice moves an element by
// O(lr) = 1e-2. Adam barely sees a gradient's scale, so the global norm is
// compared too, every step, within 1e-4 relative (a wrong normalisation of
// the loss changes it by the factor that is wrong), and SGD, which sees the
// scale, is checked as well. Every configuration is within the tolerance of
// the same reference, hence within 2e-5 of every other.

#include "small_gpt.hpp"

#include <shardmesh/shardmesh.hpp>
#include <shardmesh/train/optimizer.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::test::training {

namespace ref = shardmesh::test::reference;

using host = Kokkos::HostSpace;
using values = std::map<std::string, std::vector<double>>;
constexpr double tolerance = 1e-5;
constexpr std::size_t steps = 3;
constexpr double clip = 0.5;

inline ref::config tiny(std::size_t batch) { return small_gpt(batch, 5); }

// The step's samples: tokens and targets [global][T]; padded, sample b
// has 1 + (2b + step) mod T targets and padding (-1) after them.
struct batch {
  std::vector<int> tokens, targets;
};
inline batch batch_of_step(ref::config const& c, std::size_t step, bool padded) {
  batch b{ref::make_tokens(c, 11, 100 + step), ref::make_tokens(c, 11, 200 + step)};
  if (padded)
    for (std::size_t i = 0; i < c.B; ++i)
      for (std::size_t t = 1 + (2 * i + step) % c.T; t < c.T; ++t) b.targets[i * c.T + t] = -1;
  return b;
}

// The learning rate's factor at each step, and whether weight decay also
// applies to the parameters of one dimension (layer norms' gains and biases).
struct reference_schedule {
  std::vector<double> lr_factors = std::vector<double>(steps, 1.0);
  bool decay_vectors = false;
};

// A user's own update rule, written as a user would against
// update_rule.hpp: PyTorch's Adagrad (L2 decay added to the gradient, no
// learning-rate decay, a zero initial accumulator):
//   d = g + decay p;  s += d^2;  p -= lr d / (sqrt(s) + eps).
struct adagrad {
  double lr = 0.01;
  double eps = 1e-10;
  double weight_decay = 0;

  static constexpr char const* name = "adagrad";
  static constexpr std::size_t state_tensors = 1;
  static constexpr std::array<char const*, 1> state_names = {"sum_of_squares"};

  [[nodiscard]] std::vector<std::pair<std::string, double>> hyperparameters() const {
    return {{"lr", lr}, {"eps", eps}, {"weight_decay", weight_decay}};
  }
  [[nodiscard]] std::string error() const {
    return parallel::hyperparameter::positive(lr) ? std::string{}
                                                  : parallel::hyperparameter::error("lr", lr, "positive");
  }

  template <class T>
  struct step {
    T lr, eps, decay;
    KOKKOS_FUNCTION void operator()(T& p, T g, T* sum) const {
      T const d = g + decay * p;
      sum[0] += d * d;
      p -= lr * d / (Kokkos::sqrt(sum[0]) + eps);
    }
  };

  template <class T>
  [[nodiscard]] step<T> at(std::size_t) const {
    return {static_cast<T>(lr), static_cast<T>(eps), static_cast<T>(weight_decay)};
  }
};

// The serial optimizers, written from their definitions.
struct reference_optimizer {
  parallel::optimizer method;
  reference_schedule schedule;
  std::set<std::string> decayed;
  values m, v;
  void step(values& p, values const& g, std::size_t t, double scale) {
    for (auto& [name, w] : p) {
      double const lr_factor = schedule.lr_factors.at(t - 1);
      double const decay_factor = decayed.contains(name) ? 1.0 : 0.0;
      auto& m1 = m[name];
      auto& m2 = v[name];
      m1.resize(w.size(), 0.0);
      m2.resize(w.size(), 0.0);
      std::vector<double> const& grad = g.at(name);
      for (std::size_t i = 0; i < w.size(); ++i) {
        double const d = scale * grad[i];
        if (auto const* s = method.target<parallel::sgd>()) {
          m1[i] = s->momentum * m1[i] + d + decay_factor * s->weight_decay * w[i];
          w[i] -= lr_factor * s->lr * m1[i];
        } else if (auto const* a = method.target<parallel::adamw>()) {
          m1[i] = a->beta1 * m1[i] + (1 - a->beta1) * d;
          m2[i] = a->beta2 * m2[i] + (1 - a->beta2) * d * d;
          double const mhat = m1[i] / (1 - std::pow(a->beta1, static_cast<double>(t)));
          double const vhat = m2[i] / (1 - std::pow(a->beta2, static_cast<double>(t)));
          w[i] -= lr_factor * a->lr * (decay_factor * a->weight_decay * w[i] + mhat / (std::sqrt(vhat) + a->eps));
        } else {
          auto const& r = *method.target<adagrad>();
          double const decayed_d = d + decay_factor * r.weight_decay * w[i];
          m1[i] += decayed_d * decayed_d;
          w[i] -= lr_factor * r.lr * decayed_d / (std::sqrt(m1[i]) + r.eps);
        }
      }
    }
  }
};

struct history {
  values parameters;
  std::vector<double> losses, norms;
};

// The loss and every parameter's gradient at parameters p in step `step`.
using step_gradients = std::function<std::pair<double, values>(values const& p, std::size_t step)>;

// `steps` steps of the optimizer from `start`, clipping the global norm;
// weight decay on the parameters named in `decayed`.
inline history train_serial(values const& start, parallel::optimizer const& method, reference_schedule const& schedule,
                            std::set<std::string> decayed, step_gradients const& gradients) {
  history h{start, {}, {}};
  reference_optimizer o{method, schedule, std::move(decayed), {}, {}};
  for (std::size_t s = 0; s < steps; ++s) {
    auto const [loss, g] = gradients(h.parameters, s);
    double squares = 0;
    for (auto const& [name, v] : g)
      for (double x : v) squares += x * x;
    double const norm = std::sqrt(squares);
    h.losses.push_back(loss);
    h.norms.push_back(norm);
    o.step(h.parameters, g, s + 1, norm > clip ? clip / (norm + 1e-6) : 1.0);
  }
  return h;
}

inline history train_reference(ref::config const& c, values const& start, parallel::optimizer const& method,
                               bool padded = false, reference_schedule const& schedule = {}) {
  std::set<std::string> decayed;
  ref::parameters shapes = ref::zero_parameters(c);
  ref::for_each_parameter(c, shapes, [&](std::string const& name, auto const&, std::vector<std::size_t> const& shape) {
    if (shape.size() >= 2 || schedule.decay_vectors) decayed.insert(name);
  });
  return train_serial(start, method, schedule, decayed, [&](values const& at, std::size_t s) {
    ref::parameters p = ref::zero_parameters(c);
    ref::for_each_parameter(c, p,
                            [&](std::string const& name, std::vector<double>& v, auto const&) { v = at.at(name); });
    batch const b = batch_of_step(c, s, padded);
    ref::forward_result const f = ref::forward(c, p, b.tokens, b.targets);
    return std::pair{f.loss, by_name(c, ref::backward(c, p, f, b.tokens, b.targets))};
  });
}

template <class MemorySpace = host>
dynamic_dtensor<int, 2, MemorySpace> rows(device_mesh const& mesh, layout const& l, std::vector<int> const& all,
                                          interval samples, std::size_t T) {
  Kokkos::View<int**, Kokkos::LayoutRight, host> global("ids", samples.size(), T);
  std::copy(all.begin() + static_cast<std::ptrdiff_t>(samples.begin * T),
            all.begin() + static_cast<std::ptrdiff_t>(samples.end * T), global.data());
  return distribute<MemorySpace>(mesh, l, global);
}

// A distributed tensor's global values, gathered.
template <class Tensor>
std::vector<double> gathered(Tensor const& x) {
  auto const g = gather(x);
  return std::vector<double>(g.data(), g.data() + g.size());
}

// got within `relative` times want's largest magnitude (plus 1e-7), element by element.
inline void require_close_to_scale(std::string const& what, std::vector<double> const& got,
                                   std::vector<double> const& want, double relative) {
  REQUIRE(got.size() == want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": " << got[i] << " vs " << want[i] << " (largest " << scale << ")");
    REQUIRE(std::abs(got[i] - want[i]) <= relative * scale + 1e-7);
  }
}

// A pipeline training run's configuration.
struct pipeline_setup {
  std::size_t dp, pp, tp;
  parallel::schedule_kind schedule;
  std::size_t chunks;  // v
  parallel::zero_stage stage;
  std::size_t micro_batches;
  std::vector<std::size_t> layer_counts;  // per virtual stage; empty: balanced
  std::size_t cp = 1;                     // context parallelism: a "cp" axis when above 1
  std::size_t ep = 0;                     // expert parallelism: an "ep" axis of this extent when above 0
};

inline std::string describe(pipeline_setup const& s) {
  std::string out = "dp=" + std::to_string(s.dp) + " pp=" + std::to_string(s.pp) + " tp=" + std::to_string(s.tp) + " " +
                    std::string(to_string(s.schedule)) + " v=" + std::to_string(s.chunks) + " ZeRO-" +
                    std::to_string(static_cast<int>(s.stage)) + " m=" + std::to_string(s.micro_batches);
  if (s.cp > 1) out += " cp=" + std::to_string(s.cp);
  if (s.ep > 0) out += " ep=" + std::to_string(s.ep);
  if (!s.layer_counts.empty()) out += " layers";
  for (std::size_t n : s.layer_counts) out += " " + std::to_string(n);
  return out;
}

// Losses within `relative` of want's, norms within 10 x relative, every parameter within `bound`.
inline void require_close(history const& got, history const& want, double bound, double relative = 1e-5) {
  for (std::size_t s = 0; s < steps; ++s) {
    INFO("step " << s);
    CHECK(std::abs(got.losses[s] - want.losses[s]) <= relative * want.losses[s]);
    CHECK(std::abs(got.norms[s] - want.norms[s]) <= 10 * relative * want.norms[s]);
  }
  REQUIRE(got.parameters.size() == want.parameters.size());
  for (auto const& [name, w] : want.parameters) {
    auto const& g = got.parameters.at(name);
    REQUIRE(g.size() == w.size());
    double worst = 0;
    for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
    INFO(name << ": largest difference " << worst);
    CHECK(worst <= bound);
  }
}

}  // namespace shardmesh::test::training
