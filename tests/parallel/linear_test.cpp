// The linear layer in its three parallel forms (replicated, column- and
// row-parallel weight), forward and backward against serial products, with
// the collectives each issues counted: none for replicated and
// column-parallel forward, one all-reduce for row-parallel forward, and the
// conjugates backward (the column-parallel input gradient comes out
// P(sum:tp) and is all-reduced on its move to the input's layout).
#include "mpi_test.hpp"
#include "serial_einsum.hpp"

#include "../ops/ops_check.hpp"

#include <shardmesh/nn/linear.hpp>

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <string>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace linear_test {

using namespace shardmesh;

namespace {

using host = Kokkos::HostSpace;
using layer = parallel::linear<"btc,cf->btf", double, host>;
constexpr dim_placement R = replicated;
// Sums of at most 10 products of values below 1: far below 1e-12 of error in double.
constexpr double tolerance = 1e-12;

struct form {
  char const* name;
  layout weight, input, output;
  std::uint64_t forward_all_reduces, backward_all_reduces;
};

}  // namespace

TEST_CASE("linear: replicated, column- and row-parallel forms equal the serial product and count their collectives",
          "[parallel][linear][counters]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"tp", dynamic_extent}});
  bool const single = mesh.size() == 1;
  tensor_index const ex = test::extents({2, 3, 4}), ew = test::extents({4, 6}), ey = test::extents({2, 3, 6});
  auto const gx = test::pseudo_random(24, 1), gw = test::pseudo_random(24, 2), gdy = test::pseudo_random(36, 3);
  tensor_index e{};
  auto const want_y = test::einsum(parse_contraction("btc,cf->btf"), gx, ex, gw, ew, e);
  auto const want_dx = test::einsum(parse_contraction("btf,cf->btc"), gdy, ey, gw, ew, e);
  auto const want_dw = test::einsum(parse_contraction("btc,btf->cf"), gx, ex, gdy, ey, e);
  form const forms[] = {
      {"replicated", {R, R}, {R, R, R}, {R, R, R}, 0, 0},
      {"column-parallel", {R, shard("tp")}, {R, R, R}, {R, R, shard("tp")}, 0, 1},
      {"row-parallel", {shard("tp"), R}, {R, R, shard("tp")}, {R, R, R}, 1, 0},
  };
  for (form const& f : forms) {
    INFO(f.name << " on " << mesh.size() << " ranks");
    layer l(layer::weight("w", mesh, f.weight, {4, 6}, gw), f.input, f.output);
    auto const x = test::make<3>(mesh, f.input, ex, gx);
    mesh.counters().reset();
    auto const y = l.forward(x);
    CHECK(mesh.counters().total().calls == (single ? 0 : f.forward_all_reduces));
    CHECK(y.layout() == f.output);
    test::require_close(test::values_of(y), want_y, tolerance);
    auto const dy = test::make<3>(mesh, f.output, ey, gdy);
    mesh.counters().reset();
    auto const dx =
        ops::detail::to_layout(l.backward(dy), bind(mesh.shape(), f.input), Kokkos::DefaultHostExecutionSpace{});
    CHECK(mesh.counters().total().calls == (single ? 0 : f.backward_all_reduces));
    test::require_close(test::values_of(dx), want_dx, tolerance);
    test::require_close(test::values_of(l.w().grad()), want_dw, tolerance);
    // A second step accumulates (in place) into the same gradient.
    (void)l.forward(x);
    (void)l.backward(dy);
    std::vector<double> twice = want_dw;
    for (double& v : twice) v *= 2;
    test::require_close(test::values_of(l.w().grad()), twice, tolerance);
    l.w().zero_grad();
    CHECK_FALSE(l.w().has_grad());
  }
}

}  // namespace linear_test
