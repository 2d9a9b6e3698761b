// Elementwise ops, reductions, softmax, layer and RMS norm, SwiGLU, rotary
// embeddings, grouped-query heads and cross-entropy on dtensors: forward against serial loops for inputs in every
// layout of a small enumeration (so that each planned move is exercised), backward against central finite differences
// of the distributed forward.
#include "ops_check.hpp"

#include "../algebra/layout_enumeration.hpp"

#include <shardmesh/ops/cross_entropy.hpp>
#include <shardmesh/ops/elementwise.hpp>
#include <shardmesh/ops/heads.hpp>
#include <shardmesh/ops/layer_norm.hpp>
#include <shardmesh/ops/reduction.hpp>
#include <shardmesh/ops/softmax.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <functional>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace ops_test {

using namespace shardmesh;

namespace {

using host = Kokkos::HostSpace;
template <std::size_t Rank>
using tensor = dynamic_dtensor<double, Rank, host>;

tensor_index const shape{3, 4, 5};  // uneven on 2, 3 and 4 ranks
constexpr std::size_t count = 60;
// Forward: a few rounded operations on values below 1 in magnitude.
constexpr double exact = 1e-12;
// Central differences with h = 1e-6 in double: truncation ~h^2 |f'''| and
// rounding ~1e-16 |f| / h, both below 1e-8 for these smooth functions of O(1) values.
constexpr double h = 1e-6;
constexpr double fd_tolerance = 1e-7;

std::vector<layout> layouts(device_mesh const& mesh, bool partial) {
  test::enumeration_options options;
  if (partial) options.partial = {reduce_op::sum};
  return test::all_layouts(mesh.shape(), 3, options);
}

double silu(double x) { return x / (1 + std::exp(-x)); }

double gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// Rows of the last dimension (n each) of a row-major array.
template <class F>
std::vector<double> by_rows(std::vector<double> const& x, std::size_t n, F&& row_op) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / n; ++r) row_op(&x[r * n], &y[r * n]);
  return y;
}

// sum_i w_i f(x)_i, evaluated by the distributed forward from global values.
using objective = std::function<double(std::vector<double> const&)>;

// Compares a gradient (global, row-major) with central differences of f at
// every element (the shapes are small).
void check_gradient(objective const& f, std::vector<double> x, std::vector<double> const& gradient) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    double const keep = x[i];
    x[i] = keep + h;
    double const up = f(x);
    x[i] = keep - h;
    double const down = f(x);
    x[i] = keep;
    INFO("element " << i);
    REQUIRE(std::abs((up - down) / (2 * h) - gradient[i]) <= fd_tolerance * (1 + std::abs(gradient[i])));
  }
}

double dot(std::vector<double> const& a, std::vector<double> const& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

device_mesh world() { return device_mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}}); }

}  // namespace

TEST_CASE("elementwise ops equal serial loops from every pair of layouts", "[ops][elementwise]") {
  device_mesh const mesh = world();
  auto const ga = test::pseudo_random(count, 1);
  auto const gb = test::pseudo_random(count, 2);
  std::vector<double> sum(count), product(count), g(count);
  for (std::size_t i = 0; i < count; ++i) {
    sum[i] = ga[i] + gb[i];
    product[i] = ga[i] * gb[i];
    g[i] = gelu(ga[i]);
  }
  for (layout const& la : layouts(mesh, true))
    for (layout const& lb : layouts(mesh, true)) {
      INFO(to_string(la).view() << " and " << to_string(lb).view());
      auto const a = test::make<3>(mesh, la, shape, ga);
      auto const b = test::make<3>(mesh, lb, shape, gb);
      test::require_close(test::values_of(ops::add(a, b)), sum, exact);
      test::require_close(test::values_of(ops::multiply(a, b)), product, exact);
      test::require_close(test::values_of(ops::gelu(a)), g, exact);
    }
}

TEST_CASE("gelu backward matches finite differences", "[ops][elementwise][gradient]") {
  device_mesh const mesh = world();
  layout const l{replicated, shard("tp"), replicated};
  auto const w = test::pseudo_random(count, 3);
  auto const gx = test::pseudo_random(count, 4);
  objective const f = [&](std::vector<double> const& x) {
    return dot(w, test::values_of(ops::gelu(test::make<3>(mesh, l, shape, x))));
  };
  auto const dx = ops::gelu_backward(test::make<3>(mesh, l, shape, gx), test::make<3>(mesh, l, shape, w));
  check_gradient(f, gx, test::values_of(dx));
}

TEST_CASE("reductions over each dimension equal serial loops; sum and mean backward broadcast", "[ops][reduction]") {
  device_mesh const mesh = world();
  auto const gx = test::pseudo_random(count, 5);
  for (std::size_t dim = 0; dim < 3; ++dim) {
    std::vector<double> sums, maxima;
    tensor_index e = shape;
    e[dim] = 1;
    for (std::size_t f = 0; f < count; ++f) {
      tensor_index i{f / 20, f / 5 % 4, f % 5};
      i[dim] = 0;
      std::size_t const o = test::flat(e, i, 3);
      if (o >= sums.size()) sums.resize(o + 1, 0), maxima.resize(o + 1, -1e300);
      sums[o] += gx[f];
      maxima[o] = std::max(maxima[o], gx[f]);
    }
    for (layout const& l : layouts(mesh, false)) {
      INFO("dimension " << dim << " of " << to_string(l).view());
      auto const x = test::make<3>(mesh, l, shape, gx);
      test::require_close(test::values_of(ops::sum(x, dim)), sums, exact);
      std::vector<double> means = sums;
      for (double& m : means) m /= static_cast<double>(shape[dim]);
      test::require_close(test::values_of(ops::mean(x, dim)), means, exact);
      test::require_close(test::values_of(ops::reduce(x, dim, reduce_op::max)), maxima, exact);
      CHECK(std::abs(ops::total(x) - std::accumulate(gx.begin(), gx.end(), 0.0)) < exact * count);
      // The gradient of sum(x, dim) . w is w broadcast along dim.
      auto const w = test::pseudo_random(sums.size(), dim);
      tensor_index ew{};
      for (std::size_t d = 0, k = 0; d < 3; ++d)
        if (d != dim) ew[k++] = shape[d];
      auto const dx = ops::sum_backward(x, dim, test::make<2>(mesh, layout{replicated, replicated}, ew, w));
      auto const got = test::values_of(dx);
      auto const got_mean =
          test::values_of(ops::mean_backward(x, dim, test::make<2>(mesh, layout{replicated, replicated}, ew, w)));
      for (std::size_t f = 0; f < count; ++f) {
        tensor_index i{f / 20, f / 5 % 4, f % 5};
        i[dim] = 0;
        REQUIRE(got[f] == w[test::flat(e, i, 3)]);
        REQUIRE(std::abs(got_mean[f] - w[test::flat(e, i, 3)] / static_cast<double>(shape[dim])) < exact);
      }
    }
  }
}

TEST_CASE("max backward and product backward match finite differences", "[ops][reduction][einsum][gradient]") {
  device_mesh const mesh = world();
  layout const l{replicated, shard("tp"), replicated};
  auto const gx = test::pseudo_random(count, 13);  // distinct values: no ties
  tensor_index const e2{3, 5};
  auto const w = test::pseudo_random(15, 14);
  objective const f = [&](std::vector<double> const& x) {
    return dot(w, test::values_of(ops::reduce(test::make<3>(mesh, l, shape, x), 1, reduce_op::max)));
  };
  auto const x = test::make<3>(mesh, l, shape, gx);
  auto const y = ops::reduce(x, 1, reduce_op::max);
  auto const dx = ops::max_backward(x, 1, y, test::make<2>(mesh, layout{replicated, replicated}, e2, w));
  check_gradient(f, gx, test::values_of(dx));

  // C = A.B: dA = dC.B^T ("ij,kj->ik"), dB = A^T.dC ("ik,ij->kj"), as the linear layers compute them.
  tensor_index const ea{4, 6}, eb{6, 5}, ec{4, 5};
  auto const ga = test::pseudo_random(24, 15);
  auto const gb = test::pseudo_random(30, 16);
  auto const wc = test::pseudo_random(20, 17);
  layout const rows{shard("tp"), replicated}, cols{replicated, shard("tp")};
  auto const b = test::make<2>(mesh, rows, eb, gb);
  auto const dc = test::make<2>(mesh, cols, ec, wc);
  objective const by_a = [&](std::vector<double> const& a) {
    return dot(wc, test::values_of(ops::einsum<"ik,kj->ij">(test::make<2>(mesh, cols, ea, a), b)));
  };
  objective const by_b = [&](std::vector<double> const& v) {
    return dot(wc, test::values_of(
                       ops::einsum<"ik,kj->ij">(test::make<2>(mesh, cols, ea, ga), test::make<2>(mesh, rows, eb, v))));
  };
  check_gradient(by_a, ga, test::values_of(ops::einsum<"ij,kj->ik">(dc, b)));
  check_gradient(by_b, gb, test::values_of(ops::einsum<"ik,ij->kj">(test::make<2>(mesh, cols, ea, ga), dc)));
}

TEST_CASE("softmax, causal or not, equals serial rows from every layout; backward matches differences",
          "[ops][softmax][gradient]") {
  device_mesh const mesh = world();
  tensor_index const scores{2, 5, 5};  // [batch, queries, keys]
  std::size_t const n = 50;
  auto const gx = test::pseudo_random(n, 6);
  for (ops::masking mask : {ops::masking::none, ops::masking::causal}) {
    std::vector<double> want(n);
    for (std::size_t r = 0; r < 10; ++r) {
      std::size_t const visible = mask == ops::masking::causal ? r % 5 + 1 : 5;
      double m = -1e300, s = 0;
      for (std::size_t j = 0; j < visible; ++j) m = std::max(m, gx[r * 5 + j]);
      for (std::size_t j = 0; j < visible; ++j) s += std::exp(gx[r * 5 + j] - m);
      for (std::size_t j = 0; j < 5; ++j) want[r * 5 + j] = j < visible ? std::exp(gx[r * 5 + j] - m) / s : 0.0;
    }
    for (layout const& l : layouts(mesh, true)) {
      INFO(to_string(l).view());
      if (mask == ops::masking::causal && l[1].dist != distribution::block) continue;
      test::require_close(test::values_of(ops::softmax(test::make<3>(mesh, l, scores, gx), mask)), want, exact);
    }
    layout const l{replicated, shard("tp"), replicated};
    auto const w = test::pseudo_random(n, 7);
    objective const f = [&](std::vector<double> const& x) {
      return dot(w, test::values_of(ops::softmax(test::make<3>(mesh, l, scores, x), mask)));
    };
    auto const y = ops::softmax(test::make<3>(mesh, l, scores, gx), mask);
    auto const dx = ops::softmax_backward(y, test::make<3>(mesh, l, scores, w));
    check_gradient(f, gx, test::values_of(dx));
  }
}

TEST_CASE("layer norm equals serial rows from every layout; backward matches differences", "[ops][layer_norm]") {
  device_mesh const mesh = world();
  tensor_index const e1{5};
  auto const gx = test::pseudo_random(count, 8);
  auto gg = test::pseudo_random(5, 9);
  for (double& v : gg) v += 1;
  auto const gb = test::pseudo_random(5, 10);
  double const eps = 1e-5;
  auto const want = by_rows(gx, 5, [&](double const* x, double* y) {
    double m = 0, v = 0;
    for (std::size_t j = 0; j < 5; ++j) m += x[j] / 5;
    for (std::size_t j = 0; j < 5; ++j) v += (x[j] - m) * (x[j] - m) / 5;
    for (std::size_t j = 0; j < 5; ++j) y[j] = (x[j] - m) / std::sqrt(v + eps) * gg[j] + gb[j];
  });
  layout const r1{replicated};
  auto const gamma = test::make<1>(mesh, r1, e1, gg);
  auto const beta = test::make<1>(mesh, r1, e1, gb);
  for (layout const& l : layouts(mesh, true)) {
    INFO(to_string(l).view());
    test::require_close(test::values_of(ops::layer_norm(test::make<3>(mesh, l, shape, gx), gamma, beta, eps).y), want,
                        1e-10);
  }
  // Backward, with the rows sharded: dgamma and dbeta come out partial and reduce on the move to R.
  layout const l{replicated, shard("tp"), replicated};
  auto const w = test::pseudo_random(count, 11);
  auto const run = [&](std::vector<double> const& x, std::vector<double> const& g, std::vector<double> const& b) {
    return dot(w, test::values_of(ops::layer_norm(test::make<3>(mesh, l, shape, x), test::make<1>(mesh, r1, e1, g),
                                                  test::make<1>(mesh, r1, e1, b), eps)
                                      .y));
  };
  auto const f = ops::layer_norm(test::make<3>(mesh, l, shape, gx), gamma, beta, eps);
  auto const grads = ops::layer_norm_backward(f.saved, gamma, test::make<3>(mesh, l, shape, w));
  check_gradient([&](auto const& x) { return run(x, gg, gb); }, gx, test::values_of(grads.dx));
  check_gradient([&](auto const& g) { return run(gx, g, gb); }, gg, test::values_of(redistribute(grads.dgamma, r1)));
  check_gradient([&](auto const& b) { return run(gx, gg, b); }, gb, test::values_of(redistribute(grads.dbeta, r1)));

  // A residual, given in another layout (moved to dx's): dx plus the residual.
  auto const residual = test::pseudo_random(count, 12);
  auto const fused =
      ops::layer_norm_backward(f.saved, gamma, test::make<3>(mesh, l, shape, w),
                               test::make<3>(mesh, layout{replicated, replicated, shard("tp")}, shape, residual));
  auto want_dx = test::values_of(grads.dx);
  for (std::size_t i = 0; i < count; ++i) want_dx[i] += residual[i];
  REQUIRE(fused.dx.layout() == grads.dx.layout());
  test::require_close(test::values_of(fused.dx), want_dx, 1e-12);
  test::require_close(test::values_of(redistribute(fused.dgamma, r1)), test::values_of(redistribute(grads.dgamma, r1)),
                      1e-12);
  // A residual of another shape is refused on every rank before anything moves.
  auto const small = test::make<3>(mesh, l, tensor_index{3, 4, 4}, test::pseudo_random(48, 13));
  REQUIRE_THROWS_AS(ops::layer_norm_backward(f.saved, gamma, test::make<3>(mesh, l, shape, w), small),
                    mismatched_tensor_error);
}

TEST_CASE("RMS norm equals serial rows from every layout; backward matches differences", "[ops][layer_norm]") {
  device_mesh const mesh = world();
  tensor_index const e1{5};
  auto const gx = test::pseudo_random(count, 18);
  auto gg = test::pseudo_random(5, 19);
  for (double& v : gg) v += 1;
  double const eps = 1e-5;
  auto const want = by_rows(gx, 5, [&](double const* x, double* y) {
    double squares = 0;
    for (std::size_t j = 0; j < 5; ++j) squares += x[j] * x[j] / 5;
    for (std::size_t j = 0; j < 5; ++j) y[j] = x[j] / std::sqrt(squares + eps) * gg[j];
  });
  layout const r1{replicated};
  auto const gamma = test::make<1>(mesh, r1, e1, gg);
  for (layout const& l : layouts(mesh, true)) {
    INFO(to_string(l).view());
    test::require_close(test::values_of(ops::rms_norm(test::make<3>(mesh, l, shape, gx), gamma, eps).y), want, 1e-10);
  }
  layout const l{replicated, shard("tp"), replicated};
  auto const w = test::pseudo_random(count, 20);
  auto const run = [&](std::vector<double> const& x, std::vector<double> const& g) {
    return dot(w,
               test::values_of(ops::rms_norm(test::make<3>(mesh, l, shape, x), test::make<1>(mesh, r1, e1, g), eps).y));
  };
  auto const f = ops::rms_norm(test::make<3>(mesh, l, shape, gx), gamma, eps);
  auto const grads = ops::layer_norm_backward(f.saved, gamma, test::make<3>(mesh, l, shape, w));
  check_gradient([&](auto const& x) { return run(x, gg); }, gx, test::values_of(grads.dx));
  check_gradient([&](auto const& g) { return run(gx, g); }, gg, test::values_of(redistribute(grads.dgamma, r1)));
  // With a residual: dx plus it.
  auto const residual = test::pseudo_random(count, 21);
  auto const fused = ops::layer_norm_backward(f.saved, gamma, test::make<3>(mesh, l, shape, w),
                                              test::make<3>(mesh, l, shape, residual));
  auto want_dx = test::values_of(grads.dx);
  for (std::size_t i = 0; i < count; ++i) want_dx[i] += residual[i];
  test::require_close(test::values_of(fused.dx), want_dx, 1e-12);
}

TEST_CASE("SwiGLU equals serial loops from every pair of layouts; backward matches differences",
          "[ops][elementwise][gradient]") {
  device_mesh const mesh = world();
  auto const ga = test::pseudo_random(count, 22);
  auto const gb = test::pseudo_random(count, 23);
  std::vector<double> want(count);
  for (std::size_t i = 0; i < count; ++i) want[i] = silu(ga[i]) * gb[i];
  for (layout const& la : layouts(mesh, false))
    for (layout const& lb : layouts(mesh, false)) {
      INFO(to_string(la).view() << " and " << to_string(lb).view());
      test::require_close(
          test::values_of(ops::swiglu(test::make<3>(mesh, la, shape, ga), test::make<3>(mesh, lb, shape, gb))), want,
          exact);
    }
  layout const l{replicated, replicated, shard("tp")};
  auto const w = test::pseudo_random(count, 24);
  auto const run = [&](std::vector<double> const& a, std::vector<double> const& b) {
    return dot(w, test::values_of(ops::swiglu(test::make<3>(mesh, l, shape, a), test::make<3>(mesh, l, shape, b))));
  };
  auto const d = ops::swiglu_backward(test::make<3>(mesh, l, shape, ga), test::make<3>(mesh, l, shape, gb),
                                      test::make<3>(mesh, layout{shard("tp"), replicated, replicated}, shape, w));
  check_gradient([&](auto const& a) { return run(a, gb); }, ga, test::values_of(d.d_gate));
  check_gradient([&](auto const& b) { return run(ga, b); }, gb, test::values_of(d.d_up));
}

namespace {

tensor_index const heads_shape{2, 5, 3, 4};  // [b, t, h, d]
constexpr std::size_t heads_count = 120;

std::vector<layout> head_layouts() {
  return {
      layout{replicated, replicated, replicated, replicated}, layout{replicated, replicated, shard("tp"), replicated},
      layout{shard("tp"), replicated, replicated, replicated}, layout{replicated, shard("tp"), replicated, replicated},
      layout{replicated, replicated, replicated, shard("tp")}};
}

}  // namespace

TEST_CASE("rotary embeddings equal their closed form from every layout; backward is the transpose",
          "[ops][rotary][gradient]") {
  device_mesh const mesh = world();
  double const base = 10000;
  auto const gx = test::pseudo_random(heads_count, 25);
  // Element (b, t, h, i) and (b, t, h, i + 2) rotated by t base^(-2i/4), written out.
  std::vector<double> want(heads_count);
  for (std::size_t r = 0; r < heads_count / 4; ++r) {
    double const t = static_cast<double>(r / 3 % 5);
    for (std::size_t i = 0; i < 2; ++i) {
      double const angle = t * std::pow(base, -static_cast<double>(i) / 2);
      double const a = gx[r * 4 + i], b = gx[r * 4 + i + 2];
      want[r * 4 + i] = a * std::cos(angle) - b * std::sin(angle);
      want[r * 4 + i + 2] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  for (layout const& l : head_layouts()) {
    INFO(to_string(l).view());
    auto const y = ops::rotary(test::make<4>(mesh, l, heads_shape, gx), base);
    test::require_close(test::values_of(y), want, 1e-12);
    // Rotating back gives x again.
    test::require_close(test::values_of(ops::rotary_backward(y, base)), gx, 1e-12);
  }
  // Scores see relative positions only: q at t and k at u score as q at t + 1 and k at u + 1.
  auto const rotated = test::values_of(ops::rotary(test::make<4>(mesh, head_layouts()[1], heads_shape, gx), base));
  auto const at = [&](std::size_t t, std::size_t h) { return &rotated[(t * 3 + h) * 4]; };
  std::vector<double> x_shifted(heads_count);
  auto const dot4 = [](double const* a, double const* b) {
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
  };
  for (std::size_t r = 0; r < heads_count; ++r) x_shifted[r] = gx[r];
  // Put sample 0's vectors at t = 0, 1 into positions 1, 2 and compare the score of heads 0 and 1.
  for (std::size_t j = 0; j < 24; ++j) x_shifted[12 + j] = gx[j];
  auto const shifted =
      test::values_of(ops::rotary(test::make<4>(mesh, head_layouts()[0], heads_shape, x_shifted), base));
  CHECK(std::abs(dot4(at(0, 0), at(1, 1)) - dot4(&shifted[(1 * 3 + 0) * 4], &shifted[(2 * 3 + 1) * 4])) < 1e-12);
  // Backward: the gradient of sum w . rotary(x) by differences.
  layout const l{replicated, replicated, shard("tp"), replicated};
  auto const w = test::pseudo_random(heads_count, 26);
  auto const dx = ops::rotary_backward(test::make<4>(mesh, l, heads_shape, w), base);
  check_gradient(
      [&](auto const& x) { return dot(w, test::values_of(ops::rotary(test::make<4>(mesh, l, heads_shape, x), base))); },
      gx, test::values_of(dx));
  // An odd head size is refused.
  REQUIRE_THROWS_AS(ops::rotary(test::make<4>(mesh, l, tensor_index{1, 2, 3, 3}, test::pseudo_random(18, 27)), base),
                    invalid_option_error);
}

TEST_CASE("grouped-query heads: expand copies each group's shared head, reduce is its transpose", "[ops][heads]") {
  device_mesh const mesh = world();
  std::size_t const n = mesh.size();
  // 6 query heads over 1, 2, 3 and 6 key/value heads; queries split on tp, shared heads whole or split with them.
  for (std::size_t kv : {1, 2, 3, 6}) {
    std::size_t const group = 6 / kv;
    tensor_index const q_shape{2, 3, 6, 2}, kv_shape{2, 3, kv, 2};
    auto const gkv = test::pseudo_random(12 * kv, 28);
    std::vector<double> want(72);
    for (std::size_t r = 0; r < 6; ++r)
      for (std::size_t q = 0; q < 6; ++q)
        for (std::size_t j = 0; j < 2; ++j) want[(r * 6 + q) * 2 + j] = gkv[(r * kv + q / group) * 2 + j];
    layout const queries{replicated, replicated, shard("tp"), replicated};
    std::vector<layout> shared{layout{replicated, replicated, replicated, replicated}};
    if (kv % n == 0) shared.push_back(queries);
    for (layout const& ls : shared) {
      INFO(kv << " key/value heads " << to_string(ls).view());
      auto const x = test::make<4>(mesh, ls, kv_shape, gkv);
      auto const y = ops::expand_heads(x, bind(mesh.shape(), queries), 6);
      test::require_close(test::values_of(y), want, 0);
      // <expand(x), w> = <x, reduce(w)>.
      auto const w = test::pseudo_random(72, 29);
      auto const back = ops::reduce_heads(test::make<4>(mesh, queries, q_shape, w), bind(mesh.shape(), ls), kv);
      CHECK(back.bound().partial_axes.empty() == (ls == queries));  // a group split over ranks sums over them
      CHECK(std::abs(dot(want, w) - dot(gkv, test::values_of(back))) < 1e-12);
    }
  }
  // Query heads that read a shared head another rank holds are refused.
  if (n > 1) {
    layout const split{replicated, replicated, shard("tp"), replicated};
    auto const x = test::make<4>(mesh, split, tensor_index{1, 1, n, 2}, test::pseudo_random(2 * n, 30));
    layout const whole{replicated, replicated, replicated, replicated};
    REQUIRE_THROWS_AS(ops::expand_heads(x, bind(mesh.shape(), whole), 2 * n), invalid_layout_error);
  }
}

TEST_CASE("cross-entropy with sharded classes equals the serial loss, never gathers the logits",
          "[ops][cross_entropy][gradient]") {
  device_mesh const mesh = world();
  std::size_t const tp = mesh.size();
  tensor_index const logits_shape{2, 3, 7};  // 7 classes: uneven on 2, 3 and 4 ranks
  auto const gx = test::pseudo_random(42, 12);
  Kokkos::View<int**, Kokkos::LayoutRight, host> targets("targets", 2, 3);
  for (std::size_t i = 0; i < 6; ++i) targets.data()[i] = static_cast<int>((i * 5 + 1) % 7);
  double want = 0;
  for (std::size_t r = 0; r < 6; ++r) {
    double m = -1e300, s = 0;
    for (std::size_t j = 0; j < 7; ++j) m = std::max(m, gx[r * 7 + j]);
    for (std::size_t j = 0; j < 7; ++j) s += std::exp(gx[r * 7 + j] - m);
    want += (std::log(s) + m - gx[r * 7 + static_cast<std::size_t>(targets.data()[r])]) / 6;
  }
  auto const t = distribute<host>(mesh, layout{replicated, replicated}, targets);
  for (layout const& l : layouts(mesh, true)) {
    INFO(to_string(l).view());
    auto const x = test::make<3>(mesh, l, logits_shape, gx);
    mesh.counters().reset();
    auto const f = ops::cross_entropy(x, t);
    CHECK(std::abs(f.loss - want) < exact);
    // Vocabulary parallel: three all-reduces of one value per row, nothing of the logits' size.
    if (l == layout{replicated, replicated, shard("tp")} && tp > 1) {
      CHECK(mesh.counters().total().calls == 3);
      CHECK(test::calls(mesh, "all_reduce") == 3);
    }
  }
  layout const l{replicated, replicated, shard("tp")};
  objective const loss = [&](std::vector<double> const& x) {
    return ops::cross_entropy(test::make<3>(mesh, l, logits_shape, x), t).loss;
  };
  auto const f = ops::cross_entropy(test::make<3>(mesh, l, logits_shape, gx), t);
  check_gradient(loss, gx, test::values_of(ops::cross_entropy_backward(f)));
}

}  // namespace ops_test
