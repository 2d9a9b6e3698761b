// Attention over key/value blocks by the online softmax (ring attention's
// local kernels) against a direct softmax over all keys at once, in double
// with plain loops: the output, each row's log-sum-exp and the gradients of
// queries, keys and values, with the blocks in order, reversed and shuffled,
// grouped-query heads, causal and not. Adversarial inputs: scores to
// +-14400 (integer entries, so that the float scores are exact), where exp
// underflows for all but a few keys and a block's running sums rescale to
// nothing when a later block's maximum is larger; queries before every key
// (no key seen: output 0, log-sum-exp -inf, no gradient); rows whose first
// blocks are all masked. Float kernels against the double reference within
// 1e-5 of max(1, the largest element of what is compared).
#include "attention_reference.hpp"
#include "mpi_test.hpp"

#include <shardmesh/ops/local/blockwise_attention.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace blockwise_attention_test {

using namespace shardmesh::ops::local;
using namespace shardmesh::test::attention;

namespace {

using space = Kokkos::DefaultExecutionSpace;
using tensor4 = Kokkos::View<float****, Kokkos::LayoutRight, space::memory_space>;
using tensor3 = Kokkos::View<float***, Kokkos::LayoutRight, space::memory_space>;

tensor4 device4(values const& x, std::size_t B, std::size_t T, std::size_t H, std::size_t D) {
  tensor4 out("x", B, T, H, D);
  auto host = Kokkos::create_mirror_view(out);
  for (std::size_t e = 0; e < x.size(); ++e) host.data()[e] = static_cast<float>(x[e]);
  Kokkos::deep_copy(out, host);
  return out;
}

template <class View>
values host_values(View const& x) {
  auto const host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, x);
  return values(host.data(), host.data() + host.size());
}

// Keys [first, first + count) of a [B, Tk, Hk, D] tensor, as a block of its own.
values keys_of(shape const& s, values const& k, std::size_t first, std::size_t count) {
  values out;
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t j = first; j < first + count; ++j)
      for (std::size_t h = 0; h < s.Hk; ++h)
        for (std::size_t d = 0; d < s.D; ++d) out.push_back(k[at(s.Tk, s.Hk, s.D, b, j, h, d)]);
  return out;
}

// The blocks' kernels, in `order`: block n holds keys [starts[n], starts[n] + sizes[n]), at positions from
// k0 + starts[n].
result blockwise(shape const& s, values const& q, values const& k, values const& v, values const& dout,
                 std::vector<std::size_t> const& sizes, std::vector<std::size_t> const& order, std::size_t q0,
                 std::size_t k0, bool causal, double scale) {
  space const exec;
  std::vector<std::size_t> starts(sizes.size());
  std::exclusive_scan(sizes.begin(), sizes.end(), starts.begin(), std::size_t{0});
  tensor4 const qd = device4(q, s.B, s.Tq, s.H, s.D), dod = device4(dout, s.B, s.Tq, s.H, s.D);
  tensor4 acc("acc", s.B, s.Tq, s.H, s.D), out("out", s.B, s.Tq, s.H, s.D), dq("dq", s.B, s.Tq, s.H, s.D);
  tensor3 m("m", s.B, s.Tq, s.H), l("l", s.B, s.Tq, s.H), lse("lse", s.B, s.Tq, s.H), delta("delta", s.B, s.Tq, s.H);
  std::vector<tensor4> kb, vb, dk, dv;
  for (std::size_t n = 0; n < sizes.size(); ++n) {
    kb.push_back(device4(keys_of(s, k, starts[n], sizes[n]), s.B, sizes[n], s.Hk, s.D));
    vb.push_back(device4(keys_of(s, v, starts[n], sizes[n]), s.B, sizes[n], s.Hk, s.D));
    dk.emplace_back("dk", s.B, sizes[n], s.Hk, s.D);
    dv.emplace_back("dv", s.B, sizes[n], s.Hk, s.D);
  }
  auto const where = [&](std::size_t n) { return attention_block{q0, k0 + starts[n], causal, scale}; };
  attention_start(exec, acc, m, l);
  for (std::size_t n : order) attention_block_forward(exec, qd, kb[n], vb[n], where(n), acc, m, l);
  attention_finish(exec, acc, m, l, out, lse);
  attention_delta(exec, out, dod, delta);
  for (std::size_t n : order)
    attention_block_backward(exec, qd, kb[n], vb[n], dod, lse, delta, where(n), dq, dk[n], dv[n]);
  exec.fence();
  result r{host_values(out), host_values(lse), host_values(dq), values(k.size()), values(v.size())};
  for (std::size_t n = 0; n < sizes.size(); ++n) {
    values const dkn = host_values(dk[n]), dvn = host_values(dv[n]);
    std::size_t e = 0;
    for (std::size_t b = 0; b < s.B; ++b)
      for (std::size_t j = starts[n]; j < starts[n] + sizes[n]; ++j)
        for (std::size_t h = 0; h < s.Hk; ++h)
          for (std::size_t d = 0; d < s.D; ++d, ++e) {
            r.dk[at(s.Tk, s.Hk, s.D, b, j, h, d)] = dkn[e];
            r.dv[at(s.Tk, s.Hk, s.D, b, j, h, d)] = dvn[e];
          }
  }
  return r;
}

// |got - want| <= 1e-5 max(1, want's largest element), -inf where want is.
void require_close(char const* what, values const& got, values const& want) {
  double scale = 0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  double worst = 0;
  for (std::size_t e = 0; e < want.size(); ++e) {
    if (!std::isfinite(want[e])) {
      INFO(what << " element " << e << " is " << got[e] << ", want " << want[e]);
      REQUIRE(got[e] == want[e]);
      continue;
    }
    worst = std::max(worst, std::abs(got[e] - want[e]));
  }
  INFO(what << ": largest difference " << worst << " against a scale of " << scale);
  CHECK(worst <= 1e-5 * std::max(scale, 1.0));
}

values randoms(std::size_t n, unsigned seed, bool integers) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> real(-1, 1);
  std::uniform_int_distribution<int> whole(-60, 60);
  values out(n);
  for (double& x : out) x = integers ? whole(g) : real(g);
  return out;
}

void check(shape const& s, std::vector<std::size_t> const& sizes, std::size_t q0, std::size_t k0, bool causal,
           double scale, bool large_scores) {
  values const q = randoms(s.B * s.Tq * s.H * s.D, 1, large_scores),
               k = randoms(s.B * s.Tk * s.Hk * s.D, 2, large_scores);
  values const v = randoms(s.B * s.Tk * s.Hk * s.D, 3, false), dout = randoms(s.B * s.Tq * s.H * s.D, 4, false);
  result const want = direct(s, q, k, v, dout, q0, k0, causal, scale);
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::vector<std::vector<std::size_t>> orders{order, {order.rbegin(), order.rend()}};
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  orders.push_back(order);
  for (auto const& o : orders) {
    INFO("blocks in the order of the first block " << o.front());
    result const got = blockwise(s, q, k, v, dout, sizes, o, q0, k0, causal, scale);
    require_close("output", got.out, want.out);
    require_close("log-sum-exp", got.lse, want.lse);
    require_close("query gradient", got.dq, want.dq);
    require_close("key gradient", got.dk, want.dk);
    require_close("value gradient", got.dv, want.dv);
  }
}

}  // namespace

TEST_CASE("blockwise attention by the online softmax equals a direct softmax over every key, in any block order",
          "[ops][local][attention]") {
  shape const s{2, 5, 4, 2, 3, 12};  // grouped: 2 query heads per key/value head
  std::vector<std::size_t> const sizes{3, 5, 4};
  SECTION("causal, the queries after the keys") { check(s, sizes, 7, 0, true, 0.5, false); }
  SECTION("not causal") { check(s, sizes, 0, 0, false, 0.5, false); }
  SECTION("causal, queries among the keys: the last blocks hide from the first queries") {
    check(s, sizes, 2, 0, true, 0.5, false);
  }
}

TEST_CASE("blockwise attention holds on adversarial scores and on rows that see no key", "[ops][local][attention]") {
  SECTION("scores to +-14400, exact in float") { check({1, 4, 2, 1, 4, 12}, {4, 4, 4}, 11, 0, true, 1.0, true); }
  SECTION("queries before every key: no key seen, output 0, log-sum-exp -inf") {
    // Queries at 0 to 4, keys at 2 to 13: queries 0 and 1 see none; in reverse order, query 2's first blocks are
    // all masked.
    check({1, 5, 2, 2, 3, 12}, {1, 6, 5}, 0, 2, true, 1.0, false);
  }
}

TEST_CASE("blockwise attention refuses shapes that do not fit", "[ops][local][attention]") {
  space const exec;
  tensor4 const q("q", 1, 2, 3, 4), k("k", 1, 2, 2, 4), v("v", 1, 2, 2, 4), acc("acc", 1, 2, 3, 4);
  tensor3 const m("m", 1, 2, 3), l("l", 1, 2, 3);
  REQUIRE_THROWS_AS(attention_block_forward(exec, q, k, v, {}, acc, m, l), shardmesh::local_extents_error);
}

}  // namespace blockwise_attention_test
