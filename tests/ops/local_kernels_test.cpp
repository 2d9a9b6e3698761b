// The local kernels of sharded compute against plain double loops, in float
// and double at odd sizes, and each backward against central differences of
// its forward (double, h = 1e-6, |fd - analytic| <= 1e-6 * max(1, |analytic|)).
// Loops compare within 1e-5 * max(1, |want|) in float and 1e-12 in double.
// Kernels run on a partitioned instance, not the default one.
#include "kernel_recording.hpp"
#include "mpi_test.hpp"

#include <shardmesh/ops/local/elementwise.hpp>
#include <shardmesh/ops/local/exponential.hpp>
#include <shardmesh/ops/local/gelu.hpp>
#include <shardmesh/ops/local/layer_norm.hpp>
#include <shardmesh/ops/local/optimizer.hpp>
#include <shardmesh/ops/local/reduce.hpp>
#include <shardmesh/ops/local/reshape.hpp>
#include <shardmesh/ops/local/softmax.hpp>
#include <shardmesh/train/update_rules.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace local_kernels_test {

using namespace shardmesh;
using namespace shardmesh::ops::local;

namespace {

using space = Kokkos::DefaultExecutionSpace;
using test::two_instances;
using values = std::vector<double>;
template <class T>
using device_vector = Kokkos::View<T*, Kokkos::LayoutRight, space::memory_space>;

constexpr std::size_t odd_sizes[] = {1, 3, 17};
constexpr double inf = std::numeric_limits<double>::infinity();

template <class T>
constexpr double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-12;

// Fixed-seed values in [lo, hi], rounded to T so that references see what kernels see.
template <class T>
values randoms(std::size_t count, unsigned seed, double lo = -2, double hi = 2) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  values v(count);
  for (auto& e : v) e = static_cast<double>(static_cast<T>(dist(gen)));
  return v;
}

template <class T>
device_vector<T> to_device(values const& h) {
  device_vector<T> v("v", h.size());
  auto const m = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < h.size(); ++i) m(i) = static_cast<T>(h[i]);
  Kokkos::deep_copy(v, m);
  return v;
}

template <class V>
values to_host(space const& exec, V const& v) {
  exec.fence();
  auto const m = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, v);
  values h(v.size());
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = static_cast<double>(m.data()[i]);
  return h;
}

// "" when got is within tol * max(1, |want|) of want everywhere (infinities exactly), else the first miss.
std::string first_miss(values const& got, values const& want, double tol) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    bool const ok =
        std::isinf(want[i]) ? got[i] == want[i] : std::abs(got[i] - want[i]) <= tol * std::max(1.0, std::abs(want[i]));
    if (!ok) return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " != " + std::to_string(want[i]);
  }
  return "";
}

double dot(values const& a, values const& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of loss(x) = sum_i w_i f(x)_i, one per element of x.
values central_differences(values const& x, std::function<values(values const&)> const& f, values const& w) {
  constexpr double h = 1e-6;
  values g(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) {
    values plus = x;
    values minus = x;
    plus[j] += h;
    minus[j] -= h;
    g[j] = (dot(w, f(plus)) - dot(w, f(minus))) / (2 * h);
  }
  return g;
}

constexpr double fd_tolerance = 1e-6;

// Plain references.
double ref_gelu(double x) {
  double const t = std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x));
  return 0.5 * x * (1 + t);
}
double ref_gelu_derivative(double x) {
  double const t = std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * std::sqrt(2 / std::numbers::pi) * (1 + 3 * 0.044715 * x * x);
}

// Whether row r, column c is masked: key c + col_offset after query r % period + row_offset.
bool masked_at(causal_mask const& m, std::size_t r, std::size_t c) {
  return c + m.col_offset > r % m.period + m.row_offset;
}

values ref_softmax(values const& x, std::size_t rows, std::size_t n, std::optional<causal_mask> mask) {
  values y(x.size(), 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    double top = -inf;
    for (std::size_t c = 0; c < n; ++c)
      if (!mask || !masked_at(*mask, r, c)) top = std::max(top, x[r * n + c]);
    if (top == -inf) continue;
    double sum = 0;
    for (std::size_t c = 0; c < n; ++c)
      if (!mask || !masked_at(*mask, r, c)) sum += std::exp(x[r * n + c] - top);
    for (std::size_t c = 0; c < n; ++c)
      if (!mask || !masked_at(*mask, r, c)) y[r * n + c] = std::exp(x[r * n + c] - top) / sum;
  }
  return y;
}

values ref_softmax_backward(values const& y, values const& dy, std::size_t rows, std::size_t n) {
  values dx(y.size());
  for (std::size_t r = 0; r < rows; ++r) {
    double s = 0;
    for (std::size_t c = 0; c < n; ++c) s += dy[r * n + c] * y[r * n + c];
    for (std::size_t c = 0; c < n; ++c) dx[r * n + c] = y[r * n + c] * (dy[r * n + c] - s);
  }
  return dx;
}

struct ref_norm {
  values y, mean, rstd;
};
ref_norm ref_layer_norm(values const& x, values const& g, values const& b, double eps, std::size_t rows,
                        std::size_t n) {
  ref_norm out{values(x.size()), values(rows), values(rows)};
  for (std::size_t r = 0; r < rows; ++r) {
    double mu = 0;
    for (std::size_t c = 0; c < n; ++c) mu += x[r * n + c] / static_cast<double>(n);
    double var = 0;
    for (std::size_t c = 0; c < n; ++c) var += (x[r * n + c] - mu) * (x[r * n + c] - mu) / static_cast<double>(n);
    double const s = 1 / std::sqrt(var + eps);
    for (std::size_t c = 0; c < n; ++c) out.y[r * n + c] = g[c] * (x[r * n + c] - mu) * s + b[c];
    out.mean[r] = mu;
    out.rstd[r] = s;
  }
  return out;
}

struct ref_norm_grads {
  values dx, dgamma, dbeta;
};
ref_norm_grads ref_layer_norm_backward(values const& x, values const& g, values const& mean, values const& rstd,
                                       values const& dy, std::size_t rows, std::size_t n) {
  ref_norm_grads out{values(x.size()), values(n, 0.0), values(n, 0.0)};
  for (std::size_t r = 0; r < rows; ++r) {
    double a = 0;
    double b = 0;
    for (std::size_t c = 0; c < n; ++c) {
      double const xhat = (x[r * n + c] - mean[r]) * rstd[r];
      a += g[c] * dy[r * n + c] / static_cast<double>(n);
      b += g[c] * dy[r * n + c] * xhat / static_cast<double>(n);
      out.dgamma[c] += dy[r * n + c] * xhat;
      out.dbeta[c] += dy[r * n + c];
    }
    for (std::size_t c = 0; c < n; ++c) {
      double const xhat = (x[r * n + c] - mean[r]) * rstd[r];
      out.dx[r * n + c] = rstd[r] * (g[c] * dy[r * n + c] - a - xhat * b);
    }
  }
  return out;
}

values ref_reduce(reduce_op op, values const& x, std::size_t outer, std::size_t n, std::size_t inner) {
  values y(outer * inner);
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t i = 0; i < inner; ++i) {
      double acc = op == reduce_op::sum ? 0 : op == reduce_op::max ? -inf : op == reduce_op::min ? inf : 1;
      for (std::size_t k = 0; k < n; ++k) {
        double const v = x[(o * n + k) * inner + i];
        if (op == reduce_op::sum) acc += v;
        if (op == reduce_op::max) acc = std::max(acc, v);
        if (op == reduce_op::min) acc = std::min(acc, v);
        if (op == reduce_op::prod) acc *= v;
      }
      y[o * inner + i] = acc;
    }
  return y;
}

constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::max, reduce_op::min, reduce_op::prod};

// Masks with nonzero offsets and a period: the second leaves rows 0 and 1
// (and 3 and 4) with nothing visible.
constexpr causal_mask masks[] = {{3, 2, 1}, {3, 0, 2}, {4, 5, 3}};

}  // namespace

// Element steps with no state and with three state values.
template <class T>
struct halve_gradient_step {
  KOKKOS_FUNCTION void operator()(T& p, T g, T*) const { p -= g / 2; }
};
template <class T>
struct three_states_step {
  KOKKOS_FUNCTION void operator()(T& p, T g, T* s) const {
    s[0] += g;
    s[1] = 2 * s[0];
    s[2] = p;
    p += s[1];
  }
};

TEMPLATE_TEST_CASE("apply_update runs an element step on every element with its state, the gradient scaled",
                   "[ops][local][optimizer]", float, double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  for (std::size_t size : odd_sizes) {
    CAPTURE(size);
    values const p = randoms<T>(size, 1), g = randoms<T>(size, 2), s0 = randoms<T>(size, 3);
    auto const pd = to_device<T>(p), gd = to_device<T>(g);
    apply_update(exec, halve_gradient_step<T>{}, pd, gd, Kokkos::Array<device_vector<T>, 0>{}, 3.0);
    values want(size);
    for (std::size_t i = 0; i < size; ++i) want[i] = p[i] - 3 * g[i] / 2;
    CHECK(first_miss(to_host(exec, pd), want, tolerance<T>) == "");

    auto const qd = to_device<T>(p);
    Kokkos::Array<device_vector<T>, 3> state{to_device<T>(s0), device_vector<T>("s1", size),
                                             device_vector<T>("s2", size)};
    apply_update(exec, three_states_step<T>{}, qd, gd, state, 0.5);
    values want_p(size), want_s0(size), want_s1(size);
    for (std::size_t i = 0; i < size; ++i) {
      want_s0[i] = s0[i] + 0.5 * g[i];
      want_s1[i] = 2 * want_s0[i];
      want_p[i] = p[i] + want_s1[i];
    }
    CHECK(first_miss(to_host(exec, qd), want_p, tolerance<T>) == "");
    CHECK(first_miss(to_host(exec, state[0]), want_s0, tolerance<T>) == "");
    CHECK(first_miss(to_host(exec, state[1]), want_s1, tolerance<T>) == "");
    CHECK(first_miss(to_host(exec, state[2]), p, tolerance<T>) == "");
  }
  device_vector<T> const short_state("short", 2), p("p", 3), g("g", 3);
  CHECK_THROWS_AS(
      apply_update(exec, three_states_step<T>{}, p, g, Kokkos::Array<device_vector<T>, 3>{short_state, p, p}, 1.0),
      local_extents_error);
}

TEMPLATE_TEST_CASE("sum_of_squares matches a plain double loop, sizes off the blocks of eight included",
                   "[ops][local][optimizer]", float, double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  for (std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9}, std::size_t{1003}}) {
    CAPTURE(size);
    values const x = randoms<T>(size, 4);
    double want = 0;
    for (double v : x) want += static_cast<double>(static_cast<T>(v)) * static_cast<double>(static_cast<T>(v));
    Kokkos::View<double, space::memory_space> const out("out");
    sum_of_squares(exec, to_device<T>(x), out);
    double got = 0;
    Kokkos::deep_copy(got, out);
    CHECK(std::abs(got - want) <= 1e-12 * std::max(1.0, want));
  }
}

TEMPLATE_TEST_CASE("AdamW's element step at update t follows its formula", "[ops][local][optimizer]", float, double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  shardmesh::parallel::adamw const rule{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.2};
  std::size_t const size = 17, t = 3;
  values const p = randoms<T>(size, 1), g = randoms<T>(size, 2), m = randoms<T>(size, 3),
               v0 = randoms<T>(size, 4, 0, 1);
  auto const pd = to_device<T>(p);
  Kokkos::Array<device_vector<T>, 2> state{to_device<T>(m), to_device<T>(v0)};
  apply_update(exec, rule.at<T>(t), pd, to_device<T>(g), state, 1.0);
  values want(size);
  for (std::size_t i = 0; i < size; ++i) {
    double const m1 = 0.8 * m[i] + 0.2 * g[i], v1 = 0.9 * v0[i] + 0.1 * g[i] * g[i];
    double const mhat = m1 / (1 - std::pow(0.8, 3)), vhat = v1 / (1 - std::pow(0.9, 3));
    want[i] = p[i] - 0.1 * (0.2 * p[i] + mhat / (std::sqrt(vhat) + 1e-3));
  }
  CHECK(first_miss(to_host(exec, pd), want, tolerance<T>) == "");
}

// The float step against a double reference carried in double over many
// updates at the default betas. Each update starts from p = 0 without
// decay, so p after the step is -lr times the update, rounded once. Float
// rounding alone keeps the update within 3e-6 of the reference (a few
// roundings per step, and m's and v's, damped by the betas, accumulating:
// 1.6e-6 measured over these 300 updates); weights formed as
// T(1) - T(beta2) are 1.3e-5 off and make updates 6.4e-6 too large (7e-6
// measured).
TEST_CASE("AdamW in float follows a double reference over many updates", "[ops][local][optimizer]") {
  auto const instances = two_instances();
  space const& exec = instances[1];
  shardmesh::parallel::adamw const rule{.lr = 1e-3, .weight_decay = 0};
  std::size_t const size = 33, updates = 300;
  values m(size, 0.0), v(size, 0.0);
  Kokkos::Array<device_vector<float>, 2> state{device_vector<float>("m", size), device_vector<float>("v", size)};
  values const sign = randoms<float>(size, 5, -1, 1);  // m keeps each element's sign: no cancellation
  double worst = 0;
  for (std::size_t t = 1; t <= updates; ++t) {
    values g = randoms<float>(size, static_cast<unsigned>(100 + t), 0.5, 1.5);
    for (std::size_t i = 0; i < size; ++i) g[i] = sign[i] < 0 ? -g[i] : g[i];
    auto const pd = to_device<float>(values(size, 0.0));
    apply_update(exec, rule.at<float>(t), pd, to_device<float>(g), state, 1.0);
    values const p = to_host(exec, pd);
    for (std::size_t i = 0; i < size; ++i) {
      m[i] = rule.beta1 * m[i] + (1 - rule.beta1) * g[i];
      v[i] = rule.beta2 * v[i] + (1 - rule.beta2) * g[i] * g[i];
      double const mhat = m[i] / (1 - std::pow(rule.beta1, static_cast<double>(t)));
      double const vhat = v[i] / (1 - std::pow(rule.beta2, static_cast<double>(t)));
      double const want = -rule.lr * mhat / (std::sqrt(vhat) + rule.eps);
      worst = std::max(worst, std::abs(p[i] - want) / std::abs(want));
    }
  }
  CAPTURE(worst);
  CHECK(worst <= 3e-6);
  CHECK(first_miss(to_host(exec, state[1]), v, 3e-6) == "");
}

TEST_CASE("the kernels' float exponential is within 2 ulp of the C library's, 0, inf and NaN where expf's are",
          "[ops][local][exponential]") {
  // Every 97th float from -87.3 to 88.37 (about 24 million), both signs' small values included.
  auto const ulp_error = [](float x) {
    double const want = std::exp(static_cast<double>(x));
    double const got = exponential(x);
    double const ulp =
        std::nextafter(static_cast<float>(want), std::numeric_limits<float>::infinity()) - static_cast<float>(want);
    return std::abs(got - want) / ulp;
  };
  double worst = 0;
  float worst_at = 0;
  for (auto bits = std::bit_cast<std::uint32_t>(-87.3F); bits > 0x80000000U; bits -= 97) {
    float const x = std::bit_cast<float>(bits);
    if (double const e = ulp_error(x); e > worst) std::tie(worst, worst_at) = std::pair(e, x);
  }
  for (auto bits = std::uint32_t{0}; bits < std::bit_cast<std::uint32_t>(88.37F); bits += 97) {
    float const x = std::bit_cast<float>(bits);
    if (double const e = ulp_error(x); e > worst) std::tie(worst, worst_at) = std::pair(e, x);
  }
  INFO("worst at " << worst_at);
  CHECK(worst <= 2.0);
  CHECK(exponential(0.0F) == 1.0F);
  CHECK(exponential(-87.31F) == 0.0F);
  CHECK(exponential(-std::numeric_limits<float>::infinity()) == 0.0F);
  CHECK(exponential(88.4F) == std::numeric_limits<float>::infinity());
  CHECK(exponential(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(exponential(std::numeric_limits<float>::quiet_NaN())));
  CHECK(exponential(1.0) == std::exp(1.0));  // doubles: Kokkos::exp
}

TEMPLATE_TEST_CASE("gelu follows its tanh formula", "[ops][local][gelu]", float, double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  for (std::size_t size : odd_sizes) {
    CAPTURE(size);
    values x = randoms<T>(size, 1, -4, 4);
    x[0] = size == 17 ? 30 : x[0];  // far out: tanh saturates, no NaN
    x[size - 1] = size == 17 ? -30 : x[size - 1];
    values const dy = randoms<T>(size, 2);
    auto const xd = to_device<T>(x);
    auto const dyd = to_device<T>(dy);
    device_vector<T> y("y", size);
    device_vector<T> dx("dx", size);
    gelu_forward(exec, xd, y);
    gelu_backward(exec, xd, dyd, dx);
    values want_y(size);
    values want_dx(size);
    for (std::size_t i = 0; i < size; ++i) {
      want_y[i] = ref_gelu(x[i]);
      want_dx[i] = dy[i] * ref_gelu_derivative(x[i]);
    }
    CHECK(first_miss(to_host(exec, y), want_y, tolerance<T>) == "");
    CHECK(first_miss(to_host(exec, dx), want_dx, tolerance<T>) == "");
    gelu_forward(exec, xd, xd);  // in place
    CHECK(first_miss(to_host(exec, xd), want_y, tolerance<T>) == "");
  }
}

TEST_CASE("gelu_backward is the derivative of gelu_forward", "[ops][local][gelu]") {
  auto const instances = two_instances();
  space const& exec = instances[1];
  values const x = randoms<double>(17, 3, -4, 4);
  values const w = randoms<double>(17, 4);
  auto forward = [&](values const& in) {
    auto const xd = to_device<double>(in);
    device_vector<double> y("y", in.size());
    gelu_forward(exec, xd, y);
    return to_host(exec, y);
  };
  device_vector<double> dx("dx", x.size());
  gelu_backward(exec, to_device<double>(x), to_device<double>(w), dx);
  CHECK(first_miss(to_host(exec, dx), central_differences(x, forward, w), fd_tolerance) == "");
}

TEMPLATE_TEST_CASE("softmax matches plain loops, masked or not", "[ops][local][softmax]", float, double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  auto run = [&](std::size_t rows, std::size_t n, std::optional<causal_mask> mask) {
    values const x = randoms<T>(rows * n, 5, -6, 6);
    values const dy = randoms<T>(rows * n, 6);
    auto const xd = to_device<T>(x);
    device_vector<T> y("y", x.size());
    device_vector<T> dx("dx", x.size());
    Kokkos::View<T const*, Kokkos::LayoutRight, space::memory_space> const xc = xd;
    softmax_forward(exec, as_rows(xc, n), as_rows(y, n), mask);
    values const want = ref_softmax(x, rows, n, mask);
    values const got = to_host(exec, y);
    CHECK(first_miss(got, want, tolerance<T>) == "");
    for (std::size_t i = 0; mask && i < got.size(); ++i)
      if (masked_at(*mask, i / n, i % n)) CHECK(got[i] == 0.0);  // exactly
    auto const dyd = to_device<T>(dy);
    softmax_backward(exec, as_rows(y, n), as_rows(dyd, n), as_rows(dx, n));
    CHECK(first_miss(to_host(exec, dx), ref_softmax_backward(got, dy, rows, n), tolerance<T>) == "");
    softmax_forward(exec, as_rows(xd, n), as_rows(xd, n), mask);  // in place
    CHECK(first_miss(to_host(exec, xd), want, tolerance<T>) == "");
  };
  for (std::size_t rows : odd_sizes)
    for (std::size_t n : odd_sizes) {
      CAPTURE(rows, n);
      run(rows, n, std::nullopt);
    }
  for (auto const& m : masks)
    for (std::size_t n : odd_sizes) {
      CAPTURE(m.period, m.row_offset, m.col_offset, n);
      run(8, n, m);
    }
}

TEST_CASE("softmax rows with nothing visible are zeros", "[ops][local][softmax]") {
  auto const instances = two_instances();
  space const& exec = instances[1];
  // Row 0 is all -inf; row 1 is fully masked (query 1 + 0, keys from 2 on).
  values const x = {-inf, -inf, -inf, 1, 2, 3};
  auto const xd = to_device<double>(x);
  device_vector<double> y("y", x.size());
  softmax_forward(exec, as_rows(xd, 3), as_rows(y, 3), causal_mask{2, 0, 2});
  CHECK(to_host(exec, y) == values(6, 0.0));
  // A mask's period must be positive.
  CHECK_THROWS_AS(softmax_forward(exec, as_rows(y, 3), as_rows(y, 3), causal_mask{0, 0, 0}), std::invalid_argument);
}

TEST_CASE("softmax_backward is the derivative of softmax_forward", "[ops][local][softmax]") {
  auto const instances = two_instances();
  space const& exec = instances[1];
  std::size_t const rows = 6;
  std::size_t const n = 5;
  for (std::optional<causal_mask> const mask : {std::optional<causal_mask>{}, std::optional(masks[0])}) {
    CAPTURE(mask.has_value());
    values const x = randoms<double>(rows * n, 7, -3, 3);
    values const w = randoms<double>(rows * n, 8);
    auto forward = [&](values const& in) {
      auto const xd = to_device<double>(in);
      device_vector<double> y("y", in.size());
      softmax_forward(exec, as_rows(xd, n), as_rows(y, n), mask);
      return to_host(exec, y);
    };
    auto const y = to_device<double>(forward(x));
    auto const wd = to_device<double>(w);
    device_vector<double> dx("dx", x.size());
    softmax_backward(exec, as_rows(y, n), as_rows(wd, n), as_rows(dx, n));
    CHECK(first_miss(to_host(exec, dx), central_differences(x, forward, w), fd_tolerance) == "");
  }
}

TEMPLATE_TEST_CASE("layer norm matches plain loops", "[ops][local][layer_norm]", float, double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  T const eps = static_cast<T>(1e-5);
  for (std::size_t rows : odd_sizes)
    for (std::size_t n : odd_sizes) {
      CAPTURE(rows, n);
      values const x = randoms<T>(rows * n, 9, -3, 5);
      values const g = randoms<T>(n, 10, 0.5, 1.5);
      values const b = randoms<T>(n, 11);
      values const dy = randoms<T>(rows * n, 12);
      auto const xd = to_device<T>(x);
      auto const gd = to_device<T>(g);
      device_vector<T> y("y", x.size()), mean("mean", rows), rstd("rstd", rows);
      layer_norm_forward(exec, as_rows(xd, n), gd, to_device<T>(b), eps, as_rows(y, n), mean, rstd);
      ref_norm const want = ref_layer_norm(x, g, b, static_cast<double>(eps), rows, n);
      CHECK(first_miss(to_host(exec, y), want.y, tolerance<T>) == "");
      CHECK(first_miss(to_host(exec, mean), want.mean, tolerance<T>) == "");
      CHECK(first_miss(to_host(exec, rstd), want.rstd, tolerance<T>) == "");

      // Backward from the kernel's own mean and rstd.
      device_vector<T> dx("dx", x.size()), dgamma("dgamma", n), dbeta("dbeta", n);
      fill(exec, dgamma, T(7));  // overwritten, not accumulated
      auto const dyd = to_device<T>(dy);
      layer_norm_backward(exec, as_rows(xd, n), gd, mean, rstd, as_rows(dyd, n), as_rows(dx, n), dgamma, dbeta);
      ref_norm_grads const grads = ref_layer_norm_backward(x, g, to_host(exec, mean), to_host(exec, rstd), dy, rows, n);
      CHECK(first_miss(to_host(exec, dx), grads.dx, tolerance<T>) == "");
      CHECK(first_miss(to_host(exec, dgamma), grads.dgamma, tolerance<T>) == "");
      CHECK(first_miss(to_host(exec, dbeta), grads.dbeta, tolerance<T>) == "");

      // With a residual: dx plus the residual, the same gain and bias gradients.
      values const residual = randoms<T>(rows * n, 17);
      values with_residual = grads.dx;
      for (std::size_t i = 0; i < with_residual.size(); ++i) with_residual[i] += residual[i];
      auto const rd = to_device<T>(residual);
      layer_norm_backward(exec, as_rows(xd, n), gd, mean, rstd, as_rows(dyd, n), as_rows(dx, n), dgamma, dbeta,
                          as_rows(rd, n));
      CHECK(first_miss(to_host(exec, dx), with_residual, tolerance<T>) == "");
      CHECK(first_miss(to_host(exec, dgamma), grads.dgamma, tolerance<T>) == "");
      CHECK(first_miss(to_host(exec, dbeta), grads.dbeta, tolerance<T>) == "");
    }
}

TEST_CASE("layer_norm_backward is the derivative of layer_norm_forward", "[ops][local][layer_norm]") {
  auto const instances = two_instances();
  space const& exec = instances[1];
  for (std::size_t n : odd_sizes) {
    std::size_t const rows = 3;
    CAPTURE(n);
    values const x = randoms<double>(rows * n, 13, -3, 5);
    values const g = randoms<double>(n, 14, 0.5, 1.5);
    values const b = randoms<double>(n, 15);
    values const w = randoms<double>(rows * n, 16);
    device_vector<double> mean("mean", rows), rstd("rstd", rows);
    auto forward = [&](values const& xs, values const& gs, values const& bs) {
      auto const xd = to_device<double>(xs);
      device_vector<double> y("y", xs.size());
      layer_norm_forward(exec, as_rows(xd, n), to_device<double>(gs), to_device<double>(bs), 1e-5, as_rows(y, n), mean,
                         rstd);
      return to_host(exec, y);
    };
    forward(x, g, b);  // leaves mean and rstd for x
    device_vector<double> dx("dx", x.size()), dgamma("dgamma", n), dbeta("dbeta", n);
    auto const xd = to_device<double>(x);
    auto const wd = to_device<double>(w);
    layer_norm_backward(exec, as_rows(xd, n), to_device<double>(g), mean, rstd, as_rows(wd, n), as_rows(dx, n), dgamma,
                        dbeta);
    values const fd_x = central_differences(x, [&](values const& v) { return forward(v, g, b); }, w);
    values const fd_g = central_differences(g, [&](values const& v) { return forward(x, v, b); }, w);
    values const fd_b = central_differences(b, [&](values const& v) { return forward(x, g, v); }, w);
    CHECK(first_miss(to_host(exec, dx), fd_x, fd_tolerance) == "");
    CHECK(first_miss(to_host(exec, dgamma), fd_g, fd_tolerance) == "");
    CHECK(first_miss(to_host(exec, dbeta), fd_b, fd_tolerance) == "");
  }
}

TEMPLATE_TEST_CASE("reductions over the middle dimension match plain loops", "[ops][local][reduce]", float, double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  for (reduce_op op : all_ops)
    for (std::size_t outer : odd_sizes)
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{17}})
        for (std::size_t inner : odd_sizes) {
          CAPTURE(to_string(op), outer, n, inner);
          values const x = randoms<T>(outer * n * inner, 17, 0.5, 1.5);  // prod of 17 stays in range
          auto const xd = to_device<T>(x);
          device_vector<T> y("y", outer * inner);
          reduce_forward(exec, op, as_3d(xd, outer, n, inner), as_rows(y, inner));
          CHECK(first_miss(to_host(exec, y), ref_reduce(op, x, outer, n, inner), tolerance<T>) == "");
        }
}

TEMPLATE_TEST_CASE("reduction backward passes match plain loops; ties each get dy", "[ops][local][reduce]", float,
                   double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  std::size_t const outer = 3, n = 17, inner = 3;
  values const dy = randoms<T>(outer * inner, 18);
  auto const dy_storage = to_device<T>(dy);  // as_rows and as_3d views do not keep it alive
  auto const dyd = as_rows(dy_storage, inner);
  device_vector<T> dx("dx", outer * n * inner);
  reduce_sum_backward(exec, dyd, as_3d(dx, outer, n, inner));
  values want(dx.size());
  for (std::size_t e = 0; e < want.size(); ++e) want[e] = dy[e / (n * inner) * inner + e % inner];
  CHECK(first_miss(to_host(exec, dx), want, 0) == "");

  // Values from {0, 1, 2}: many ties at both the max and the min.
  values x(outer * n * inner);
  for (std::size_t e = 0; e < x.size(); ++e) x[e] = static_cast<double>(e * 7 % 3);
  auto const x_storage = to_device<T>(x);
  auto const xd = as_3d(x_storage, outer, n, inner);
  for (reduce_op op : {reduce_op::max, reduce_op::min}) {
    CAPTURE(to_string(op));
    values const y = ref_reduce(op, x, outer, n, inner);
    device_vector<T> yd("y", y.size());
    reduce_forward(exec, op, xd, as_rows(yd, inner));
    if (op == reduce_op::max)
      reduce_max_backward(exec, xd, as_rows(yd, inner), dyd, as_3d(dx, outer, n, inner));
    else
      reduce_min_backward(exec, xd, as_rows(yd, inner), dyd, as_3d(dx, outer, n, inner));
    std::size_t ties = 0;
    for (std::size_t e = 0; e < want.size(); ++e) {
      bool const hit = x[e] == y[e / (n * inner) * inner + e % inner];
      want[e] = hit ? dy[e / (n * inner) * inner + e % inner] : 0.0;
      ties += hit;
    }
    CHECK(ties > outer * inner);  // some output has several extremal positions
    CHECK(first_miss(to_host(exec, dx), want, 0) == "");
  }
}

TEST_CASE("reduction backward passes are the derivatives of reduce_forward", "[ops][local][reduce]") {
  auto const instances = two_instances();
  space const& exec = instances[1];
  std::size_t const outer = 3, n = 5, inner = 3;
  values const x = randoms<double>(outer * n * inner, 19);  // distinct: no ties within h
  values const w = randoms<double>(outer * inner, 20);
  auto const x_storage = to_device<double>(x);
  auto const w_storage = to_device<double>(w);
  auto const xd = as_3d(x_storage, outer, n, inner);
  auto const wd = as_rows(w_storage, inner);
  device_vector<double> dx("dx", x.size());
  for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
    CAPTURE(to_string(op));
    auto forward = [&](values const& in) {
      auto const in_storage = to_device<double>(in);
      device_vector<double> y("y", outer * inner);
      reduce_forward(exec, op, as_3d(in_storage, outer, n, inner), as_rows(y, inner));
      return to_host(exec, y);
    };
    auto const y = to_device<double>(forward(x));
    if (op == reduce_op::sum) reduce_sum_backward(exec, wd, as_3d(dx, outer, n, inner));
    if (op == reduce_op::max) reduce_max_backward(exec, xd, as_rows(y, inner), wd, as_3d(dx, outer, n, inner));
    if (op == reduce_op::min) reduce_min_backward(exec, xd, as_rows(y, inner), wd, as_3d(dx, outer, n, inner));
    CHECK(first_miss(to_host(exec, dx), central_differences(x, forward, w), fd_tolerance) == "");
  }
}

TEMPLATE_TEST_CASE("elementwise helpers match plain loops", "[ops][local][elementwise]", float, double) {
  using T = TestType;
  auto const instances = two_instances();
  space const& exec = instances[1];
  for (std::size_t size : odd_sizes) {
    CAPTURE(size);
    values const x = randoms<T>(size, 21);
    values const z = randoms<T>(size, 22);
    auto const xd = to_device<T>(x);
    Kokkos::View<T const*, Kokkos::LayoutRight, space::memory_space> const xc = xd;
    auto const zd = to_device<T>(z);
    device_vector<T> y("y", size);
    values want(size);

    fill(exec, y, T(1.5));
    CHECK(to_host(exec, y) == values(size, 1.5));
    scale(exec, y, T(-2));
    CHECK(to_host(exec, y) == values(size, -3.0));
    axpy(exec, T(0.5), xc, y);
    for (std::size_t i = 0; i < size; ++i) want[i] = static_cast<double>(T(-3) + T(0.5) * static_cast<T>(x[i]));
    CHECK(first_miss(to_host(exec, y), want, tolerance<T>) == "");
    add(exec, xc, zd, y);
    for (std::size_t i = 0; i < size; ++i) want[i] = x[i] + z[i];
    CHECK(first_miss(to_host(exec, y), want, tolerance<T>) == "");
    multiply(exec, xc, zd, y);
    for (std::size_t i = 0; i < size; ++i) want[i] = x[i] * z[i];
    CHECK(first_miss(to_host(exec, y), want, tolerance<T>) == "");
    add(exec, zd, zd, zd);  // in place
    multiply(exec, zd, xd, zd);
    for (std::size_t i = 0; i < size; ++i) want[i] = 2 * z[i] * x[i];
    CHECK(first_miss(to_host(exec, zd), want, tolerance<T>) == "");

    // A bias over rows: y [rows = 3, size] += v [size].
    values const rows = randoms<T>(3 * size, 23);
    auto const yd = to_device<T>(rows);
    add_rows(exec, as_rows(yd, size), xc);
    values want_rows(rows.size());
    for (std::size_t e = 0; e < rows.size(); ++e) want_rows[e] = rows[e] + x[e % size];
    CHECK(first_miss(to_host(exec, yd), want_rows, tolerance<T>) == "");
  }
}

TEST_CASE("reshaped views alias a contiguous shard", "[ops][local][reshape]") {
  Kokkos::View<double***, Kokkos::LayoutRight, space::memory_space> const shard("shard", 2, 3, 5);
  auto const f = flat(shard);
  static_assert(decltype(f)::rank() == 1);
  CHECK(f.extent(0) == 30);
  CHECK(f.data() == shard.data());
  auto const r = as_rows(shard, 5);
  CHECK((r.extent(0) == 6 && r.extent(1) == 5 && r.data() == shard.data()));
  auto const c = as_3d(shard, 2, 3, 5);
  CHECK((c.extent(0) == 2 && c.extent(1) == 3 && c.extent(2) == 5));
  Kokkos::View<double const***, Kokkos::LayoutRight, space::memory_space> const readonly = shard;
  static_assert(std::is_same_v<decltype(as_rows(readonly, 5))::value_type, double const>);
  CHECK(as_rows(Kokkos::View<double*, space::memory_space>("empty", 0), 0).extent(0) == 0);

  CHECK_THROWS_AS(as_rows(shard, 4), local_extents_error);
  CHECK_THROWS_AS(as_rows(shard, 0), local_extents_error);
  CHECK_THROWS_AS(as_3d(shard, 2, 3, 4), local_extents_error);
  auto const columns = Kokkos::subview(as_rows(shard, 5), Kokkos::ALL, Kokkos::pair<std::size_t, std::size_t>(0, 2));
  CHECK_THROWS_AS(flat(columns), std::invalid_argument);

  // Kernels check extents before running.
  device_vector<double> const a("a", 3);
  device_vector<double> const b("b", 4);
  space const exec;
  CHECK_THROWS_AS(add(exec, a, a, b), local_extents_error);
  CHECK_THROWS_AS(gelu_forward(exec, a, b), local_extents_error);
  CHECK_THROWS_AS(reduce_forward(exec, reduce_op::sum, as_3d(a, 1, 3, 1), as_rows(b, 2)), local_extents_error);
}

namespace {

using test::recording;
auto& kernels = test::recorded_kernels;
auto& fences = test::recorded_fences;

}  // namespace

TEST_CASE("every kernel runs on the given instance, labelled, and fences nothing", "[ops][local]") {
  auto const instances = two_instances();
  space const& exec = instances[1];
  std::uint32_t const here = Kokkos::Tools::Experimental::device_id(exec);
  std::size_t const rows = 3, n = 5;
  device_vector<double> const a("a", rows * n), b("b", rows * n), c("c", rows * n), v("v", n), w("w", n),
      r1("r1", rows), r2("r2", rows);
  Kokkos::deep_copy(a, 1.0);
  Kokkos::deep_copy(r2, 1.0);
  {
    recording const rec;
    gelu_forward(exec, a, b);
    gelu_backward(exec, a, b, c);
    softmax_forward(exec, as_rows(a, n), as_rows(b, n), causal_mask{rows, 0, 0});
    softmax_backward(exec, as_rows(a, n), as_rows(b, n), as_rows(c, n));
    layer_norm_forward(exec, as_rows(a, n), v, w, 1e-5, as_rows(b, n), r1, r2);
    layer_norm_backward(exec, as_rows(a, n), v, r1, r2, as_rows(b, n), as_rows(c, n), v, w);
    reduce_forward(exec, reduce_op::max, as_3d(a, rows, n, 1), as_rows(r1, 1));
    reduce_forward(exec, reduce_op::sum, as_3d(a, 1, rows, n), as_rows(v, n));
    reduce_sum_backward(exec, as_rows(v, n), as_3d(a, 1, rows, n));
    reduce_max_backward(exec, as_3d(a, 1, rows, n), as_rows(v, n), as_rows(w, n), as_3d(b, 1, rows, n));
    reduce_min_backward(exec, as_3d(a, 1, rows, n), as_rows(v, n), as_rows(w, n), as_3d(b, 1, rows, n));
    fill(exec, a, 2.0);
    scale(exec, a, 2.0);
    axpy(exec, 2.0, a, b);
    add(exec, a, b, c);
    multiply(exec, a, b, c);
    add_rows(exec, as_rows(c, n), v);
    CHECK(kernels.size() == 18);  // layer_norm_backward launches two
    for (auto const& e : kernels) {
      INFO("kernel " << e.name);
      CHECK(e.name.rfind("shardmesh::", 0) == 0);
      CHECK(e.device == here);
    }
    std::string fenced;
    for (auto const& e : fences)  // Kokkos fences around each kernel itself while a tool listens
      if (e.name.find("Profile Tool Fence") == std::string::npos) fenced += e.name + "; ";
    CHECK(fenced == "");
  }
  exec.fence();
}

}  // namespace local_kernels_test
