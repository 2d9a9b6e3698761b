// Sharded products against the serial product for every operand layout on
// the meshes of this rank count, and the Megatron cases' collectives
// counted: exactly those the algebra plans, none elsewhere.
#include "ops_check.hpp"

#include "../algebra/layout_enumeration.hpp"

#include <shardmesh/ops/einsum.hpp>
#include <shardmesh/ops/matmul.hpp>

#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <limits>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace einsum_test {

using namespace shardmesh;
using test::extents;

namespace {

std::vector<mesh_shape> meshes(std::size_t ranks) {
  std::vector<mesh_shape> out{mesh_shape{{"a", ranks}}};
  if (ranks == 4) out.push_back(mesh_shape{{"a", 2}, {"b", 2}});
  return out;
}

// Products of doubles: a sum of at most 7 products of numbers below 1 in
// magnitude, rounded in any order, is within 1e-13 of the exact value.
constexpr double tolerance = 1e-13;

template <contraction_text Spec, std::size_t RA, std::size_t RB>
void check_every_layout(device_mesh const& mesh, tensor_index const& ea, tensor_index const& eb, bool partial) {
  constexpr contraction k = parse_contraction(Spec.view());
  auto const ga = test::pseudo_random(test::count_of(ea, RA), 1);
  auto const gb = test::pseudo_random(test::count_of(eb, RB), 2);
  tensor_index ec{};
  auto const want = test::einsum(k, ga, ea, gb, eb, ec);
  constexpr double alpha = -0.75;
  std::vector<double> scaled = want;
  for (double& v : scaled) v *= alpha;
  auto const start = test::pseudo_random(want.size(), 5);
  std::vector<double> added = want;
  for (std::size_t i = 0; i < added.size(); ++i) added[i] += start[i];
  test::enumeration_options options;
  if (partial) options.partial = {reduce_op::sum};
  auto const layouts_a = test::all_layouts(mesh.shape(), RA, options);
  auto const layouts_b = test::all_layouts(mesh.shape(), RB, options);
  auto const outputs = test::all_layouts(mesh.shape(), k.c.size(), {});
  std::size_t n = 0;
  for (layout const& la : layouts_a)
    for (layout const& lb : layouts_b) {
      INFO(to_string(k).view() << " on " << to_string(mesh.shape()).view() << ": " << to_string(la).view() << " x "
                               << to_string(lb).view());
      auto const a = test::make<RA>(mesh, la, ea, ga);
      auto const b = test::make<RB>(mesh, lb, eb, gb);
      auto const c = ops::einsum<Spec>(a, b);
      test::require_close(test::values_of(c), want, tolerance);
      // A requested result layout, cycling through every one, and alpha
      // (applied by the local GEMM, also to partial results).
      layout const& out = outputs[n++ % outputs.size()];
      auto const d = ops::einsum<Spec>(alpha, a, b, out);
      REQUIRE(d.layout() == out);
      test::require_close(test::values_of(d), scaled, tolerance);
      // Added into a tensor in that layout (by the GEMM where it can).
      auto sum = test::make<k.c.size()>(mesh, out, ec, start);
      ops::einsum_add<Spec>(sum, a, b);
      REQUIRE(sum.layout() == out);
      test::require_close(test::values_of(sum), added, tolerance);
    }
}

}  // namespace

TEST_CASE("a sharded product equals the serial product for every operand layout", "[ops][einsum]") {
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  for (mesh_shape const& shape : meshes(ranks)) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    check_every_layout<"ik,kj->ij", 2, 2>(mesh, extents({5, 7}), extents({7, 3}), true);
    check_every_layout<"ik,jk->ij", 2, 2>(mesh, extents({5, 7}), extents({3, 7}), false);
    check_every_layout<"bik,bij->kj", 3, 3>(mesh, extents({3, 2, 5}), extents({3, 2, 4}), false);
    check_every_layout<"bthd,bshd->bhts", 4, 4>(mesh, extents({2, 3, 3, 2}), extents({2, 3, 3, 2}), false);
  }
}

TEST_CASE("matmul: batch dimensions of A, a requested constant layout", "[ops][einsum]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  auto const gx = test::pseudo_random(2 * 5 * 6, 3);
  auto const gw = test::pseudo_random(6 * 4, 4);
  tensor_index ec{};
  auto const want = test::einsum(parse_contraction("bik,kj->bij"), gx, extents({2, 5, 6}), gw, extents({6, 4}), ec);
  auto const x = test::make<3>(mesh, layout{replicated, shard("tp"), replicated}, extents({2, 5, 6}), gx);
  auto const w = test::make<2>(mesh, layout{replicated, shard("tp")}, extents({6, 4}), gw);
  test::require_close(test::values_of(ops::matmul(x, w)), want, tolerance);
  constexpr layout rows{shard("tp"), replicated, replicated};
  dtensor<double, rows, Kokkos::HostSpace> const y = ops::matmul<rows>(x, w);
  test::require_close(test::values_of(y), want, tolerance);
}

TEST_CASE("Megatron layers issue exactly the collectives the algebra plans", "[ops][einsum][counters]") {
  std::size_t const tp = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", tp}});
  constexpr dim_placement R = replicated;
  tensor_index const ex = extents({2, 6, 8});  // batch, sequence, hidden
  tensor_index const ew = extents({8, 10});
  tensor_index const eh = extents({2, 6, 10});
  tensor_index const ew2 = extents({10, 8});
  auto const x = test::make<3>(mesh, {R, R, R}, ex, test::pseudo_random(96, 5));
  auto const xs = test::make<3>(mesh, {R, shard("tp"), R}, ex, test::pseudo_random(96, 5));
  auto const w = test::make<2>(mesh, {R, shard("tp")}, ew, test::pseudo_random(80, 6));
  auto const h = test::make<3>(mesh, {R, R, shard("tp")}, eh, test::pseudo_random(120, 7));
  auto const w2 = test::make<2>(mesh, {shard("tp"), R}, ew2, test::pseudo_random(80, 8));
  std::size_t const local_out = 2 * 6 * 8 * sizeof(double);  // the row-parallel output, whole on each rank
  bool const single = tp == 1;

  SECTION("column-parallel: no collective") {
    mesh.counters().reset();
    auto const y = ops::einsum<"btc,cf->btf">(x, w, layout{R, R, shard("tp")});
    CHECK(mesh.counters().total().calls == 0);
  }
  SECTION("row-parallel: one all-reduce of the output") {
    mesh.counters().reset();
    auto const y = ops::einsum<"btf,fc->btc">(h, w2, layout{R, R, R});
    CHECK(mesh.counters().total().calls == (single ? 0U : 1U));
    CHECK(test::calls(mesh, "all_reduce") == (single ? 0U : 1U));
    if (!single) CHECK(mesh.counters()["all_reduce"].bytes_sent >= local_out * (tp - 1) / tp);
  }
  SECTION("sequence parallel: the row-parallel output reduce-scattered onto the sequence") {
    mesh.counters().reset();
    auto const y = ops::einsum<"btf,fc->btc">(h, w2, layout{R, shard("tp"), R});
    CHECK(mesh.counters().total().calls == (single ? 0U : 1U));
    CHECK(test::calls(mesh, "reduce_scatter") == (single ? 0U : 1U));
  }
  SECTION("sequence parallel: the column-parallel input all-gathered from the sequence") {
    mesh.counters().reset();
    auto const y = ops::einsum<"btc,cf->btf">(xs, w, layout{R, R, shard("tp")});
    CHECK(mesh.counters().total().calls == (single ? 0U : 1U));
    CHECK(test::calls(mesh, "all_gather") == (single ? 0U : 1U));
  }
}

TEST_CASE("bad products are refused on every rank before any communication", "[ops][einsum][errors]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  auto const x = test::make<2>(mesh, layout{replicated, replicated}, extents({3, 4}), test::pseudo_random(12, 1));
  auto const w = test::make<2>(mesh, layout{replicated, replicated}, extents({5, 2}), test::pseudo_random(10, 2));
  auto const v = test::make<2>(mesh, layout{replicated, replicated}, extents({4, 2}), test::pseudo_random(8, 3));
  mesh.counters().reset();
  CHECK_THROWS_AS(ops::einsum<"ik,kj->ij">(x, w), mismatched_tensor_error);
  CHECK_THROWS_AS(ops::einsum<"ik,kj->ij">(x, v, layout{shard("sp"), replicated}), invalid_layout_error);
  // einsum_add: into a tensor of another shape, or partial by another op than a sum.
  auto wrong_shape = test::make<2>(mesh, layout{replicated, replicated}, extents({3, 3}), test::pseudo_random(9, 4));
  CHECK_THROWS_AS(ops::einsum_add<"ik,kj->ij">(wrong_shape, x, v), mismatched_tensor_error);
  auto maxima = test::make<2>(mesh, layout{replicated, replicated}.partial(reduce_op::max, "tp"), extents({3, 2}),
                              test::pseudo_random(6, 5));
  CHECK_THROWS_AS(ops::einsum_add<"ik,kj->ij">(maxima, x, v), invalid_layout_error);
  CHECK(mesh.counters().total().calls == 0);
}

// SUMMA where gathering whole panels would hold more than the operands: the
// algebra's choice pinned at compile time, both ways.
constexpr mesh_shape grid{{"r", 2}, {"c", 2}};
constexpr layout blocks{shard("r"), shard("c")};
static_assert(static_product<grid, "ik,kj->ij", blocks, blocks, std::array<std::size_t, 2>{640, 480},
                             std::array<std::size_t, 2>{480, 400}>()
                  .algorithm == product_algorithm::summa);
static_assert(static_product<grid, "ik,kj->ij", layout{cyclic(4, "r"), cyclic(4, "c")}, blocks,
                             std::array<std::size_t, 2>{640, 480}, std::array<std::size_t, 2>{480, 400}>()
                  .algorithm == product_algorithm::summa);
// Operands replicated over an axis ("l"): SUMMA in layers (2.5-D), each
// layer walking half of the strips, where k is long beside C (C's reduction
// over the layers is small); the plain walk when the workspace allows the
// strips but not also C's partial copy the layers sum.
// strip_end's postcondition as a property, over every extent and width up to
// the bounds given of a k every rank holds whole: as few strips as greedy
// cutting in strips of `width`, none wider, none two deeper than another.
constexpr bool strips_even_and_fewest(std::size_t max_extent, std::size_t max_width) {
  constexpr mesh_shape single{{"x", 1}};
  bound_dim const k = bind(single, layout{replicated}).dims[0];
  for (std::size_t extent = 1; extent <= max_extent; ++extent)
    for (std::size_t width = 1; width <= max_width; ++width) {
      std::size_t count = 0, narrowest = extent, widest = 0;
      for (std::size_t g = 0; g < extent; ++count) {
        std::size_t const end = strip_end(single, k, k, extent, g, width);
        if (end <= g || end > extent) return false;
        narrowest = std::min(narrowest, end - g);
        widest = std::max(widest, end - g);
        g = end;
      }
      if (count != (extent + width - 1) / width || widest > width || widest - narrowest > 1) return false;
    }
  return true;
}
// At compile time on extents to 24 and widths to 12: Clang's constant evaluator stops at a million steps, which
// the whole space (to 96 and 40, the test case below) passes.
static_assert(strips_even_and_fewest(24, 12));

TEST_CASE("strips are as few as greedy cutting and even, for every extent to 96 and width to 40", "[ops][einsum]") {
  CHECK(strips_even_and_fewest(96, 40));
}

constexpr mesh_shape layered_mesh{{"r", 2}, {"l", 2}};
constexpr layout rows{shard("r"), replicated};
static_assert(static_product<layered_mesh, "ik,kj->ij", rows, rows, std::array<std::size_t, 2>{64, 4096},
                             std::array<std::size_t, 2>{4096, 64}>()
                  .algorithm == product_algorithm::summa_2_5d);
constexpr op_layouts layered_within(std::uint64_t limit) {
  compute_cost_model model;
  model.workspace_limit = limit;
  return plan_product(layered_mesh, parse_contraction("ik,kj->ij"), bind(layered_mesh, rows), bind(layered_mesh, rows),
                      std::array<std::size_t, 2>{64, 4096}, std::array<std::size_t, 2>{4096, 64}, nullptr, model);
}
static_assert(layered_within(0).workspace == 2 * 64 * 512 + 32 * 64);  // two strips of B, and C's partial block
static_assert(layered_within(2 * 64 * 512).algorithm == product_algorithm::summa);
// A limit that leaves double-buffered strips narrower than efficient_depth:
// one strip in flight, twice as wide (at most 400: each holder's run of
// 2048 in 6 even strips, as few as strips of 400 would take).
static_assert(layered_within(64 * 400).strip_buffers == 1 && layered_within(64 * 400).strip == 342);
// Tiles: where one operand travels and the limit would make strips
// shallower than a holder's run, strips as deep as the run, the travelling
// operand's other dimension cut into tiles. At ScaLAPACK's workspace for the
// benchmark's 2x1 case (n = 1024 in 64 x 64 blocks, 49280 elements): B's
// columns in 3 tiles of at most 342, blocks 64 deep, double-buffered.
constexpr mesh_shape column_of_two{{"r", 2}, {"c", 1}};
constexpr layout block_cyclic{cyclic(64, "r"), cyclic(64, "c")};
constexpr op_layouts block_cyclic_within(mesh_shape const& mesh, std::uint64_t limit) {
  compute_cost_model model;
  model.workspace_limit = limit;
  bound_layout const bound = bind(mesh, block_cyclic);  // C delivered in it too, as the benchmark asks
  return plan_product(mesh, parse_contraction("ik,kj->ij"), bound, bound, std::array<std::size_t, 2>{1024, 1024},
                      std::array<std::size_t, 2>{1024, 1024}, &bound, model);
}
constexpr op_layouts at_scalapack_memory = block_cyclic_within(column_of_two, 49280);
static_assert(at_scalapack_memory.algorithm == product_algorithm::summa);
static_assert(at_scalapack_memory.strip_tiles == 3 && at_scalapack_memory.strip == 64 &&
              at_scalapack_memory.strip_buffers == 2 && at_scalapack_memory.workspace == 2 * 342 * 64);
static_assert(block_cyclic_within(column_of_two, 0).algorithm == product_algorithm::summa &&
              block_cyclic_within(column_of_two, 0).strip_tiles == 1);
// Tiles that would read more than the narrower whole strips they replace:
// none (B's 64 columns in tiles of 22 for strips 512 deep, against whole
// strips 342 deep: layered_within(64 * 400) above).
// Both operands travel (a 2 x 2 grid): no tiles, one strip in flight, half a block deep.
static_assert(block_cyclic_within(grid, 49280).strip_tiles == 1 && block_cyclic_within(grid, 49280).strip == 32);

// tiled_strips's postcondition as a property: within the limit, and as few
// tiles as fit (one fewer would not).
constexpr bool tiles_fit_and_fewest(std::size_t max_buffered, std::size_t max_depth, std::uint64_t max_limit,
                                    std::uint64_t limit_step) {
  for (std::size_t buffered = 1; buffered <= max_buffered; ++buffered)
    for (std::size_t depth = 1; depth <= max_depth; ++depth)
      for (std::uint64_t limit = 1; limit <= max_limit; limit += limit_step) {
        strip_shape const s = tiled_strips(buffered, depth, limit);
        if (s.tiles == 0) continue;
        std::size_t const widest = (buffered + s.tiles - 1) / s.tiles;
        if (s.width != depth || s.buffers != 2 || 2 * widest * depth > limit) return false;
        if (s.tiles > 1 && 2 * ((buffered + s.tiles - 2) / (s.tiles - 1)) * depth <= limit) return false;
        if (s.tiles == 1) return false;  // whole strips fit: no tiles
      }
  return true;
}
static_assert(tiles_fit_and_fewest(40, 6, 600, 7));

TEST_CASE("tiles fit the limit and are as few as fit", "[ops][einsum]") {
  CHECK(tiles_fit_and_fewest(300, 40, 30000, 13));
}

// Small operands gathered whole are cheaper than streaming them: gather.
static_assert(
    static_product<mesh_shape{{"r", 2}}, "ik,kj->ij", layout{replicated, replicated}, layout{shard("r"), replicated},
                   std::array<std::size_t, 2>{4, 4}, std::array<std::size_t, 2>{4, 4}>()
        .algorithm == product_algorithm::gather);

TEST_CASE("SUMMA: exact over uneven, block and block-cyclic operands, its workspace within its bound",
          "[ops][einsum][summa]") {
  std::size_t const ranks = static_cast<std::size_t>(test::world_size());
  std::vector<mesh_shape> shapes{mesh_shape{{"r", ranks}, {"c", 1}}, mesh_shape{{"r", 1}, {"c", ranks}}};
  if (ranks % 2 == 0 && ranks > 2) shapes.push_back(mesh_shape{{"r", 2}, {"c", ranks / 2}});
  // A third axis the operands leave free: the layers of summa_2_5d.
  if (ranks % 2 == 0 && ranks > 2) shapes.push_back(mesh_shape{{"r", 2}, {"c", ranks / 4}, {"l", 2}});
  if (ranks % 2 == 0 && ranks > 2) shapes.push_back(mesh_shape{{"r", 1}, {"c", 2}, {"l", ranks / 2}});
  std::vector<layout> const layouts{layout{shard("r"), shard("c")}, layout{cyclic(2, "r"), cyclic(3, "c")},
                                    layout{shard("r", "c"), replicated}, layout{replicated, cyclic(5, "r", "c")}};
  std::size_t streamed = 0, layered = 0, single = 0, tiled = 0;
  for (mesh_shape const& shape : shapes) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    // Small limits make these small products stream, in strips of 1 to a few
    // indices; a latency of one element makes strips cheap, and layers pay.
    // 480 elements cut the 40 x 24 x 70 product's strips into tiles of A's rows or B's columns.
    std::vector<compute_cost_model> models(5);
    models[0].workspace_limit = 1;
    models[1].workspace_limit = 200;
    models[3].latency_elements = 1;
    models[4].workspace_limit = 480;
    for (compute_cost_model const& model : models) {
      std::uint64_t const limit = model.workspace_limit;
      ops::set_compute_cost_model(mesh, model);
      for (auto const& [m, k, n] :
           {std::array<std::size_t, 3>{33, 40, 29}, {9, 120, 7}, {7, 9, 5}, {3, 1, 2}, {40, 24, 70}}) {
        auto const ga = test::pseudo_random(m * k, 1);
        auto const gb = test::pseudo_random(k * n, 2);
        tensor_index ec{};
        auto const want = test::einsum(parse_contraction("ik,kj->ij"), ga, extents({m, k}), gb, extents({k, n}), ec);
        for (layout const& la : layouts)
          for (layout const& lb : layouts) {
            INFO(to_string(shape).view() << ": " << to_string(la).view() << " x " << to_string(lb).view() << ", " << m
                                         << "x" << k << "x" << n << ", workspace limit " << limit);
            auto const a = test::make<2>(mesh, la, extents({m, k}), ga);
            auto const b = test::make<2>(mesh, lb, extents({k, n}), gb);
            op_layouts const plan = ops::planned_product<"ik,kj->ij">(a, b);
            workspace<Kokkos::HostSpace>& pool = workspace_of<Kokkos::HostSpace>(mesh);
            pool.reset_peak();
            auto const c = ops::einsum<"ik,kj->ij">(a, b);
            std::size_t const leased = pool.peak_leased_bytes();  // before gathering c leases its own
            // Sums of k products of numbers below 1 in magnitude, in any order:
            // within k * k * epsilon of the exact value (k at most 120 here).
            test::require_close(test::values_of(c), want,
                                static_cast<double>(k * k) * std::numeric_limits<double>::epsilon());
            if (plan.algorithm == product_algorithm::gather) continue;
            layered += plan.algorithm == product_algorithm::summa_2_5d ? 1 : 0;
            single += plan.strip_buffers == 1 ? 1 : 0;
            tiled += plan.strip_tiles > 1 ? 1 : 0;
            REQUIRE(plan.strip >= 1);
            // The strips' buffers, within the bound the plan states (the result is the op's own).
            REQUIRE(leased <= plan.workspace * sizeof(double));
            ++streamed;
          }
      }
    }
    ops::set_compute_cost_model(mesh, {});
  }
  if (ranks > 1) CHECK(streamed > 0);
  if (ranks > 1) CHECK(single > 0);
  if (ranks > 1) CHECK(tiled > 0);
  if (ranks % 2 == 0 && ranks > 2) CHECK(layered > 0);
}

}  // namespace einsum_test
