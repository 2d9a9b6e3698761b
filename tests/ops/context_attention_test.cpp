// Context-parallel attention (ring and all-to-all) against a direct softmax
// over the whole sequence, in double with plain loops: the output, each
// row's log-sum-exp and the gradients of queries, keys and values, gathered
// and compared at each token's position (the balanced order stores the
// sequence permuted). Meshes of 1, 2 and 4 ranks: the sequence on cp alone,
// and with the batch on dp or the heads on tp; grouped-query heads; causal
// and not; both sequence orders. Double against double: 1e-12 of
// max(1, |value|) (a few hundred roundings, each 1e-16). The collectives are
// counted: the ring's exchanges equal ring_attention_traffic, the
// all-to-all form's transitions the algebra's predicted bytes. Bad input:
// the same typed error on every rank, nothing sent.
#include "attention_reference.hpp"
#include "ops_check.hpp"
#include "sequence_order.hpp"

#include <shardmesh/ops/context_attention.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cstddef>
#include <string>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace context_attention_test {

using namespace shardmesh;
using namespace shardmesh::test;
using namespace shardmesh::test::attention;

namespace {

using heads = dynamic_dtensor<double, 4, Kokkos::HostSpace>;

struct setup {
  mesh_shape mesh;
  std::size_t H, Hk;
};

// What one call sent, read right after it.
struct phase {
  collective_count point_to_point, all_to_all, total;
  explicit phase(device_mesh const& mesh)
      : point_to_point(mesh.counters()["point_to_point"]),
        all_to_all(mesh.counters()["all_to_all"]),
        total(mesh.counters().total()) {
    mesh.counters().reset();
  }
};

void require_near(char const* what, values const& got, values const& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t e = 0; e < want.size(); ++e) {
    INFO(what << " element " << e << ": " << got[e] << " vs " << want[e]);
    REQUIRE((got[e] == want[e] || std::abs(got[e] - want[e]) <= 1e-12 * std::max(1.0, std::abs(want[e]))));
  }
}

layout heads_layout(mesh_shape const& mesh) {
  return {mesh.find("dp") != npos ? shard("dp") : replicated, shard("cp"),
          mesh.find("tp") != npos ? shard("tp") : replicated, replicated};
}

void check(setup const& u, context_form form, sequence_order order, bool causal) {
  device_mesh const mesh(MPI_COMM_WORLD, u.mesh);
  std::size_t const cp = u.mesh.extent(u.mesh.find("cp"));
  shape const s{2, 8, u.H, u.Hk, 4, 8};
  double const scale = 0.7;
  INFO("mesh " << to_string(u.mesh).view() << ", " << to_string(form) << ", " << to_string(order)
               << (causal ? ", causal" : ""));
  values const q = pseudo_random(s.B * s.Tq * s.H * s.D, 1), k = pseudo_random(s.B * s.Tk * s.Hk * s.D, 2);
  values const v = pseudo_random(s.B * s.Tk * s.Hk * s.D, 3), dout = pseudo_random(s.B * s.Tq * s.H * s.D, 4);
  result const want = direct(s, q, k, v, dout, 0, 0, causal, scale);

  layout const l = heads_layout(u.mesh);
  auto const stored = [&](values const& x, std::size_t h) {
    return make<4>(mesh, l, {s.B, s.Tq, h, s.D}, reordered(x, s.B, s.Tq, cp, order, true));
  };
  heads const qd = stored(q, s.H), kd = stored(k, s.Hk), vd = stored(v, s.Hk), dod = stored(dout, s.H);
  auto const positions = [&](auto const& x) { return reordered(values_of(x), s.B, s.Tq, cp, order, false); };
  ops::context_options const o{"cp", form, order, causal, scale};

  mesh.counters().reset();
  auto const [out, saved] = ops::context_attention(qd, kd, vd, o);
  phase const forward(mesh);
  auto const [dq, dk, dv] = ops::context_attention_backward(saved, dod);
  phase const backward(mesh);

  require_near("output", positions(out), want.out);
  require_near("query gradient", positions(dq), want.dq);
  require_near("key gradient", positions(dk), want.dk);
  require_near("value gradient", positions(dv), want.dv);
  if (form == context_form::ring) {
    REQUIRE(out.layout() == l);
    require_near("log-sum-exp", positions(saved.lse), want.lse);
    ring_traffic const t = ring_attention_traffic(cp, kd.local().size(), sizeof(double), sizeof(double));
    REQUIRE(forward.point_to_point.calls == t.forward.exchanges);
    REQUIRE(forward.point_to_point.bytes_sent == t.forward.bytes);
    REQUIRE(forward.point_to_point.bytes_received == t.forward.bytes);
    REQUIRE(backward.point_to_point.calls == t.backward.exchanges);
    REQUIRE(backward.point_to_point.bytes_sent == t.backward.bytes);
    REQUIRE(forward.total.calls == forward.point_to_point.calls);
    REQUIRE(backward.total.calls == backward.point_to_point.calls);
  } else {
    // Forward: q, k and v to the heads, the output back; backward: the output gradient there, the gradients back.
    auto const bytes = [&](auto const& x, layout const& to) { return predicted_bytes(x, to).received[mesh.rank()]; };
    REQUIRE(forward.total.bytes_received ==
            bytes(qd, saved.q.layout()) + 2 * bytes(kd, saved.k.layout()) + bytes(saved.out, l));
    REQUIRE(backward.total.bytes_received ==
            bytes(dod, saved.q.layout()) + bytes(saved.out, l) + 2 * bytes(saved.k, l));
    REQUIRE(forward.point_to_point.calls == 0);
    if (cp > 1) REQUIRE(forward.all_to_all.calls == 4);
  }
}

std::vector<setup> setups() {
  std::size_t const n = static_cast<std::size_t>(world_size());
  // 8 query heads over 4 key/value heads: the all-to-all form splits both by whole groups on up to 4 ranks.
  std::vector<setup> all{{mesh_shape{{"cp", n}}, 8, 4}};
  if (n == 4) {
    all.push_back({mesh_shape{{"dp", 2}, {"cp", 2}}, 8, 4});
    all.push_back({mesh_shape{{"cp", 2}, {"tp", 2}}, 8, 4});
  }
  return all;
}

}  // namespace

TEST_CASE("context-parallel attention equals attention over the whole sequence, in both forms and orders",
          "[ops][attention][context]") {
  for (setup const& u : setups())
    for (context_form form : {context_form::ring, context_form::all_to_all})
      for (sequence_order order : {sequence_order::balanced, sequence_order::contiguous})
        for (bool causal : {true, false}) check(u, form, order, causal);
}

TEST_CASE("the balanced order gives every rank the same causal work", "[ops][attention][context]") {
  for (std::size_t cp : {1U, 2U, 3U, 4U, 8U}) {
    std::size_t const length = 16 * cp;
    auto const all = sequence_chunks(length, cp, sequence_order::balanced);
    std::vector<bool> seen(length, false);
    for (auto const& c : all)
      for (std::size_t i = 0; i < c.size; ++i) {
        REQUIRE(!seen[c.position + i]);  // every position once
        seen[c.position + i] = true;
        REQUIRE(ring_position(c.begin + i, length, cp, sequence_order::balanced) == c.position + i);
      }
    // Query-key pairs a rank's queries see: the same on every rank.
    std::vector<std::size_t> work(cp, 0);
    for (std::size_t r = 0; r < cp; ++r)
      for (auto const& c : rank_chunks(length, cp, r, sequence_order::balanced))
        for (std::size_t i = 0; i < c.size; ++i) work[r] += c.position + i + 1;
    for (std::size_t r = 0; r < cp; ++r) REQUIRE(work[r] == work[0]);
  }
}

TEST_CASE("context-parallel attention refuses what it cannot do, on every rank, before sending",
          "[ops][attention][context]") {
  std::size_t const n = static_cast<std::size_t>(world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"cp", n}});
  layout const l{replicated, shard("cp"), replicated, replicated};
  auto const make_heads = [&](std::size_t T, std::size_t H, layout const& at) {
    return make<4>(mesh, at, {1, T, H, 2}, pseudo_random(T * H * 2, H));
  };
  // Every tensor made first: making one is collective.
  heads const q = make_heads(4 * n, 2, l), kv = make_heads(4 * n, 2, l), one = make_heads(4 * n, 1, l);
  heads const heads_on_cp = make_heads(4 * n, 2, {replicated, replicated, shard("cp"), replicated});
  heads const odd = make_heads(3 * n, 2, l);  // 3n tokens: n chunks of 3, never 2n equal chunks
  mesh.counters().reset();
  REQUIRE_THROWS_AS(ops::context_attention(q, kv, kv, {.axis = "sp"}), invalid_option_error);
  REQUIRE_THROWS_AS(ops::context_attention(heads_on_cp, kv, kv), invalid_layout_error);
  REQUIRE_THROWS_AS(ops::context_attention(odd, odd, odd), invalid_option_error);
  REQUIRE_THROWS_AS(ops::context_attention(q, kv, one), mismatched_tensor_error);
  if (n > 1)  // one key/value head cannot split over the axis
    REQUIRE_THROWS_AS(ops::context_attention(q, one, one, {.form = context_form::all_to_all}), invalid_layout_error);
  REQUIRE(mesh.counters().total().calls == 0);
  auto const contiguous = ops::context_attention(odd, odd, odd, {.order = sequence_order::contiguous});
  REQUIRE(contiguous.out.global_extents() == odd.global_extents());
}

}  // namespace context_attention_test
