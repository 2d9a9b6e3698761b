// Layout propagation through products, elementwise ops, reductions and
// row-wise ops: the Megatron cases pinned at compile time, and each rule's
// postcondition checked exhaustively on small meshes against the serial
// simulator (local results assembled under the result layout equal the
// global computation).

#include "layout_enumeration.hpp"
#include "serial_einsum.hpp"

#include <shardmesh/algebra/propagation.hpp>
#include <shardmesh/algebra/reference_simulator.hpp>

#include <catch2/catch_test_macros.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

using namespace shardmesh;
using test::count_of;
using test::einsum;
using test::flat;

namespace {

constexpr mesh_shape mesh{{"dp", 2}, {"tp", 4}};
constexpr dim_placement R = replicated;

constexpr bound_layout B(layout const& l) { return bind(mesh, l); }

constexpr bound_layout propagate(char const* spec, layout const& a, layout const& b) {
  op_layouts const r = product_layout(mesh, parse_contraction(spec), B(a), B(b));
  return r.ok ? r.c : bound_layout{};
}

// Megatron-LM's tensor parallelism, read off the rules (x: [batch, sequence, hidden]).
// Column-parallel: W R,S(tp) -> Y sharded on features, no collective.
static_assert(propagate("btc,cf->btf", {R, R, R}, {R, shard("tp")}) == B(layout{R, R, shard("tp")}));
// Row-parallel: X sharded on features, W S(tp),R -> Y P(sum:tp).
static_assert(propagate("btf,fc->btc", {R, R, shard("tp")}, {shard("tp"), R}) ==
              B(layout{R, R, R}.partial(reduce_op::sum, "tp")));
// Attention heads on tp: the projection column-parallel by heads, scores local per head.
static_assert(propagate("btc,chd->bthd", {R, R, R}, {R, shard("tp"), R}) == B(layout{R, R, shard("tp"), R}));
static_assert(propagate("bthd,bshd->bhts", {R, R, shard("tp"), R}, {R, R, shard("tp"), R}) ==
              B(layout{R, shard("tp"), R, R}));
// Data-parallel weight gradient: the batch is contracted, dW is P(sum:dp);
// with tensor parallelism too, dW keeps the weight's tp sharding.
static_assert(propagate("btc,btf->cf", {shard("dp"), R, R}, {shard("dp"), R, R}) ==
              B(layout{R, R}.partial(reduce_op::sum, "dp")));
static_assert(propagate("btc,btf->cf", {shard("dp"), R, R}, {shard("dp"), R, shard("tp")}) ==
              B(layout{R, shard("tp")}.partial(reduce_op::sum, "dp")));
// Backward of column-parallel: dX = dY.W^T contracts the sharded features: P(sum:tp).
static_assert(propagate("btf,cf->btc", {R, R, shard("tp")}, {R, shard("tp")}) ==
              B(layout{R, R, R}.partial(reduce_op::sum, "tp")));
// A partial operand times a replicated one stays partial: the product is linear.
static_assert(propagate("btc,cf->btf", layout{R, R, R}.partial(reduce_op::sum, "tp"), {R, R}) ==
              B(layout{R, R, R}.partial(reduce_op::sum, "tp")));

// Sequence parallelism: the row-parallel output is reduce-scattered onto the
// sequence, and the next column-parallel layer gathers it back.
constexpr std::array<std::size_t, 3> act{2, 8, 16};  // batch, sequence, hidden
constexpr std::array<std::size_t, 2> weight{16, 64};
constexpr std::array<std::size_t, 2> weight_t{64, 16};
constexpr std::array<std::size_t, 3> wide{2, 8, 64};
constexpr bool reduce_scatters_onto_sequence() {
  bound_layout const want = B({shard("dp"), shard("tp"), R});
  op_layouts const r = plan_product(mesh, parse_contraction("btf,fc->btc"), B({shard("dp"), R, shard("tp")}),
                                    B({shard("tp"), R}), wide, weight_t, &want);
  redistribution_plan const p = plan_redistribution(mesh, r.c, r.out);
  return r.ok && p.size() == 1 && p[0].kind == step_kind::reduce_scatter;
}
static_assert(reduce_scatters_onto_sequence());
constexpr bool gathers_the_sequence() {
  bound_layout const want = B({shard("dp"), R, shard("tp")});
  op_layouts const r = plan_product(mesh, parse_contraction("btc,cf->btf"), B({shard("dp"), shard("tp"), R}),
                                    B({R, shard("tp")}), act, weight, &want);
  return r.ok && r.a == B({shard("dp"), R, R}) && r.b == B({R, shard("tp")}) && r.c == want;
}
static_assert(gathers_the_sequence());

// Elementwise: a replicated operand is sliced to the other (a bias on
// sharded features); partial sums add; a partial operand of a nonlinear op
// (GELU of a row-parallel output) must be reduced first.
static_assert(elementwise_layout(mesh, elementwise_kind::linear, B({R, shard("tp")}), B({R, R})).c ==
              B({R, shard("tp")}));
static_assert(elementwise_layout(mesh, elementwise_kind::linear, B(layout{R, R}.partial(reduce_op::sum, "tp")),
                                 B(layout{R, R}.partial(reduce_op::sum, "tp")))
                  .ok);
static_assert(!elementwise_layout(mesh, elementwise_kind::nonlinear, B(layout{R, R}.partial(reduce_op::sum, "tp")),
                                  B(layout{R, R}.partial(reduce_op::sum, "tp")))
                   .ok);
// A reduction over a sharded dimension is partial: the vocabulary-parallel softmax's max.
static_assert(plan_reduction(mesh, B({R, R, shard("tp")}), 2, reduce_op::max, act).c ==
              B(layout{R, R}.partial(reduce_op::max, "tp")));
// Softmax over a sharded dimension: the cheapest fix moves tp to another
// dimension (all-to-all), the sequence rather than a batch of 2.
static_assert(plan_rowwise(mesh, B({R, R, shard("tp")}), 2, act).a == B({R, shard("tp"), R}));

// Global values for the simulator: small integers, so sums are exact.
std::vector<double> values(std::size_t n, std::size_t salt) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 7 + salt * 3) % 11) - 5;
  return v;
}

// Every rank's local result, assembled under l and reduced, equals the global result.
void check_assembles(mesh_shape const& m, bound_layout const& l, tensor_index const& global,
                     std::vector<std::vector<double>> const& shards, std::vector<double> const& expected) {
  reference::simulated_tensor const got = reference::reduced({m, l, global, shards});
  reference::simulated_tensor const want = reference::cut(m, got.layout, global, expected);
  for (std::size_t r = 0; r < m.size(); ++r) {
    REQUIRE(got.shards[r].size() == want.shards[r].size());
    for (std::size_t i = 0; i < want.shards[r].size(); ++i) REQUIRE(got.shards[r][i] == want.shards[r][i]);
  }
}

std::vector<mesh_shape> property_meshes() {
  std::vector<mesh_shape> meshes = test::small_meshes(2, 2);
  meshes.push_back(mesh_shape{{"a", 3}});
  return meshes;
}

}  // namespace

TEST_CASE("a product's local results assemble to the global product under the propagated layout") {
  struct product_case {
    char const* spec;
    tensor_index ea, eb;
  };
  std::vector<product_case> const cases{{"ik,kj->ij", test::extents({3, 5}), test::extents({5, 2})},
                                        {"ik,jk->ij", test::extents({3, 5}), test::extents({2, 5})},
                                        {"bik,kj->bij", test::extents({3, 2, 5}), test::extents({5, 2})},
                                        {"bik,bkj->bij", test::extents({3, 2, 5}), test::extents({3, 5, 2})},
                                        {"bik,bij->kj", test::extents({3, 2, 5}), test::extents({3, 2, 2})}};
  test::enumeration_options const options{{reduce_op::sum, reduce_op::max}, {}};
  std::size_t checked = 0;
  for (mesh_shape const& m : property_meshes())
    for (product_case const& pc : cases) {
      contraction const k = parse_contraction(pc.spec);
      tensor_index ec{};
      std::vector<double> const ga = values(count_of(pc.ea, k.a.size()), 1);
      std::vector<double> const gb = values(count_of(pc.eb, k.b.size()), 2);
      std::vector<double> const gc = einsum(k, ga, pc.ea, gb, pc.eb, ec);
      for (layout const& la : test::all_layouts(m, k.a.size(), options))
        for (layout const& lb : test::all_layouts(m, k.b.size(), options)) {
          bound_layout const a = bind(m, la);
          bound_layout const b = bind(m, lb);
          INFO(pc.spec << " " << to_string(m).view() << " " << to_string(la).view() << " x " << to_string(lb).view());
          op_layouts const r = product_layout(m, k, a, b);
          op_layouts const planned =
              plan_product(m, k, a, b, std::span(pc.ea).first(k.a.size()), std::span(pc.eb).first(k.b.size()));
          // Postconditions of plan_product: always possible, free exactly when the rule holds as given.
          REQUIRE(planned.ok);
          INFO("planned " << to_string(m, planned.a).view() << " x " << to_string(m, planned.b).view());
          REQUIRE((planned.cost == 0) == r.ok);
          REQUIRE(product_layout(m, k, planned.a, planned.b).c == planned.c);
          if (!r.ok) continue;
          REQUIRE(plan_redistribution(m, detail::normalized(m, a), r.a).communicating_steps() == 0);
          REQUIRE(plan_redistribution(m, detail::normalized(m, b), r.b).communicating_steps() == 0);
          reference::simulated_tensor const sa = reference::cut(m, r.a, pc.ea, ga);
          reference::simulated_tensor const sb = reference::cut(m, r.b, pc.eb, gb);
          std::vector<std::vector<double>> shards(m.size());
          for (std::size_t rank = 0; rank < m.size(); ++rank) {
            tensor_index lc{};
            shards[rank] = einsum(k, sa.shards[rank], local_extents(m, r.a, pc.ea, rank), sb.shards[rank],
                                  local_extents(m, r.b, pc.eb, rank), lc);
            REQUIRE(lc == local_extents(m, r.c, ec, rank));
          }
          check_assembles(m, r.c, ec, shards, gc);
          ++checked;
        }
    }
  CHECK(checked > 1000);
}

TEST_CASE("an elementwise op's local results assemble to the global result under the propagated layout") {
  tensor_index const e = test::extents({3, 5});
  std::vector<double> const ga = values(15, 1);
  std::vector<double> const gb = values(15, 2);
  struct kind_case {
    elementwise_kind kind;
    double (*f)(double, double);
  };
  kind_case const kinds[] = {{elementwise_kind::linear, [](double x, double y) { return x + y; }},
                             {elementwise_kind::bilinear, [](double x, double y) { return x * y; }},
                             {elementwise_kind::nonlinear, [](double x, double y) { return x * x + y; }}};
  test::enumeration_options const options{{reduce_op::sum, reduce_op::max}, {1}};
  std::size_t checked = 0;
  for (mesh_shape const& m : property_meshes())
    for (kind_case const& kc : kinds) {
      std::vector<double> gc(15);
      for (std::size_t i = 0; i < 15; ++i) gc[i] = kc.f(ga[i], gb[i]);
      for (layout const& la : test::all_layouts(m, 2, options))
        for (layout const& lb : test::all_layouts(m, 2, options)) {
          bound_layout const a = bind(m, la);
          bound_layout const b = bind(m, lb);
          INFO(to_string(m).view() << " " << to_string(la).view() << " and " << to_string(lb).view());
          op_layouts const r = elementwise_layout(m, kc.kind, a, b);
          if (elementwise_error(m, a, b).empty()) {
            op_layouts const planned = plan_elementwise(m, kc.kind, a, b, std::span(e).first(2));
            REQUIRE(planned.ok);
            REQUIRE((planned.cost == 0) == r.ok);
          }
          if (!r.ok) continue;
          REQUIRE(plan_redistribution(m, detail::normalized(m, a), r.a).communicating_steps() == 0);
          REQUIRE(plan_redistribution(m, detail::normalized(m, b), r.b).communicating_steps() == 0);
          reference::simulated_tensor const sa = reference::cut(m, r.a, e, ga);
          reference::simulated_tensor const sb = reference::cut(m, r.b, e, gb);
          std::vector<std::vector<double>> shards(m.size());
          for (std::size_t rank = 0; rank < m.size(); ++rank) {
            REQUIRE(sa.shards[rank].size() == sb.shards[rank].size());
            for (std::size_t i = 0; i < sa.shards[rank].size(); ++i)
              shards[rank].push_back(kc.f(sa.shards[rank][i], sb.shards[rank][i]));
          }
          check_assembles(m, r.c, e, shards, gc);
          ++checked;
        }
    }
  CHECK(checked > 500);
}

TEST_CASE("a reduction over a dimension assembles to the global reduction; row-wise ops get whole rows") {
  tensor_index const e = test::extents({3, 5, 2});
  std::vector<double> const g = values(30, 4);
  test::enumeration_options const options{{reduce_op::sum, reduce_op::max}, {}};
  for (mesh_shape const& m : property_meshes())
    for (layout const& la : test::all_layouts(m, 3, options))
      for (std::size_t dim = 0; dim < 3; ++dim)
        for (reduce_op op : {reduce_op::sum, reduce_op::max}) {
          bound_layout const a = detail::normalized(m, bind(m, la));
          INFO(to_string(m).view() << " " << to_string(la).view() << " dim " << dim << " " << to_string(op));
          op_layouts const r = plan_reduction(m, a, dim, op, std::span(e).first(3));
          REQUIRE(r.ok);
          REQUIRE((r.cost == 0) == (a.partial_axes.empty() || a.op == op));
          // The reduced global tensor, and each rank's local reduction.
          tensor_index ec = e;
          for (std::size_t d = dim; d < 2; ++d) ec[d] = e[d + 1];
          ec[2] = 0;
          std::vector<double> gc(count_of(ec, 2), reference::detail::identity(op));
          for (std::size_t f = 0; f < g.size(); ++f) {
            tensor_index i{f / 10, f / 2 % 5, f % 2};
            tensor_index j{};
            for (std::size_t d = 0, k = 0; d < 3; ++d)
              if (d != dim) j[k++] = i[d];
            double& c = gc[flat(ec, j, 2)];
            c = reference::detail::combine(op, c, g[f]);
          }
          reference::simulated_tensor const sa = reference::cut(m, r.a, e, g);
          std::vector<std::vector<double>> shards(m.size());
          for (std::size_t rank = 0; rank < m.size(); ++rank) {
            tensor_index const le = local_extents(m, r.a, e, rank);
            tensor_index lc{};
            for (std::size_t d = 0, k = 0; d < 3; ++d)
              if (d != dim) lc[k++] = le[d];
            shards[rank].assign(count_of(lc, 2), reference::detail::identity(op));
            for (std::size_t f = 0; f < sa.shards[rank].size(); ++f) {
              tensor_index i{f / (le[1] * le[2]), f / le[2] % le[1], f % le[2]};
              tensor_index j{};
              for (std::size_t d = 0, k = 0; d < 3; ++d)
                if (d != dim) j[k++] = i[d];
              double& c = shards[rank][flat(lc, j, 2)];
              c = reference::detail::combine(op, c, sa.shards[rank][f]);
            }
          }
          check_assembles(m, r.c, ec, shards, gc);

          // Row-wise: dim whole, nothing partial, free when already so.
          op_layouts const row = plan_rowwise(m, a, dim, std::span(e).first(3));
          REQUIRE(row.ok);
          REQUIRE(row.a.dims[dim].count == 0);
          REQUIRE(row.a.partial_axes.empty());
          bool const already = a.dims[dim].count == 0 && a.partial_axes.empty();
          REQUIRE((row.cost == 0) == already);
        }
}

TEST_CASE("contractions parse, print back, and malformed ones are named with the column") {
  for (char const* spec : {"btc,cf->btf", "bthd,bshd->bhts", "btc,btf->cf", "ik,kj->ij"}) {
    REQUIRE(contraction_error(spec).empty());
    REQUIRE(to_string(parse_contraction(spec)).view() == spec);
  }
  CHECK(contraction_error("btc,cf").view() == "contraction \"btc,cf\": expected the form \"ab,bc->ac\"");
  CHECK(contraction_error("bt1,cf->btf").view() == "contraction \"bt1,cf->btf\": \"1\" at column 3 is not a letter");
  CHECK(contraction_error("btc,cf->bf").view() ==
        "contraction \"btc,cf->bf\": \"t\" is summed in A only: reduce that dimension first");
  CHECK(contraction_error("btt,tf->bf").view() == "contraction \"btt,tf->bf\": \"t\" appears twice in A");
  CHECK(contraction_error("bt,tf->bfx").view() ==
        "contraction \"bt,tf->bfx\": \"x\" of the result is in neither operand");
  // A typo in the result names the typo, not the letter it leaves summed in one operand.
  CHECK(contraction_error("ik,kj->il").view() ==
        "contraction \"ik,kj->il\": \"l\" of the result is in neither operand");
  std::array<std::size_t, 3> const a{2, 8, 16};
  std::array<std::size_t, 2> const w{12, 64};
  CHECK(contraction_shape_error(parse_contraction("btc,cf->btf"), a, w).view() ==
        "btc,cf->btf: dimension \"c\" is 16 in A and 12 in B");
}
