// What a research code reaches for beside redistribution, on 1 to 4 ranks
// ([tensor]): tensors made from a layout (every layout kind, uneven, cyclic,
// partial; generated from global indices on the device), the blocks a
// rank owns with their global offsets, typed errors
// from a moved-from tensor in every operation, results that never alias
// their input, complex elements of either library, and a transition's bytes
// known before it runs. And the debug mode for collectives
// (comm/collective_debug.hpp), run by tensor.debug_collectives.* with
// SHARDMESH_DEBUG_COLLECTIVES=1: [fingerprints], and [watchdog], which must
// end the job; [off] checks it is off by default.
#include "mpi_test.hpp"

#include <shardmesh/comm/barrier.hpp>
#include <shardmesh/comm/broadcast.hpp>
#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <complex>
#include <functional>
#include <string>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace research_api_test {

using namespace shardmesh;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::StartsWith;

namespace {

using vector = Kokkos::View<double*, Kokkos::HostSpace>;
using host_matrix = Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>;
using matrix = dynamic_dtensor<double, 2, Kokkos::HostSpace>;

// The meshes of this world size with two axes, a degenerate one included.
std::vector<mesh_shape> meshes() {
  auto const n = static_cast<std::size_t>(test::world_size());
  std::vector<mesh_shape> out{mesh_shape{{"a", n}, {"b", 1}}, mesh_shape{{"a", 1}, {"b", n}}};
  if (n % 2 == 0 && n > 2) out.push_back(mesh_shape{{"a", 2}, {"b", n / 2}});
  return out;
}

// Every layout kind on axes a and b: block (nested), cyclic, replicated, partial.
std::vector<layout> layouts() {
  return {layout{shard("a"), shard("b")},
          layout{shard("a", "b"), replicated},
          layout{cyclic(2, "a"), shard("b")},
          layout{replicated, cyclic(3, "a", "b")},
          layout{replicated, replicated}.partial(reduce_op::sum, "a"),
          layout{shard("b"), replicated}.partial(reduce_op::max, "a")};
}

// Every rank reached this point: a barrier that would hang otherwise.
void all_ranks_continue() {
  int const one = 1;
  int sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  REQUIRE(sum == test::world_size());
}

double value_at(std::size_t i, std::size_t j) { return static_cast<double>(100 * i + j) + 0.5; }

host_matrix numbered(std::size_t rows, std::size_t cols) {
  host_matrix m("m", rows, cols);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) m(i, j) = value_at(i, j);
  return m;
}

}  // namespace

TEST_CASE("zeros, full and empty make every layout kind with its shard geometry", "[tensor][factories]") {
  for (mesh_shape const& shape : meshes()) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    for (layout const& l : layouts())
      for (std::array<std::size_t, 2> const global : std::vector<std::array<std::size_t, 2>>{{5, 7}, {1, 3}}) {
        INFO(to_string(l).view() << " on " << to_string(shape).view() << ", " << global[0] << "x" << global[1]);
        tensor_index const expected = local_extents(shape, bind(mesh, l), {global[0], global[1]}, mesh.rank());
        auto const z = zeros<double, Kokkos::HostSpace>(mesh, l, global);
        auto const f = full<double, Kokkos::HostSpace>(mesh, l, global, 2.5);
        auto const e = empty<double, Kokkos::HostSpace>(mesh, l, global);
        for (auto const* x : {&z, &f, &e}) {
          REQUIRE(x->layout() == l);
          REQUIRE(x->local().extent(0) == expected[0]);
          REQUIRE(x->local().extent(1) == expected[1]);
        }
        // The tensor the layout describes, partial ones reduced: the value everywhere.
        auto const zs = gather(z);
        auto const fs = gather(f);
        for (std::size_t i = 0; i < global[0]; ++i)
          for (std::size_t j = 0; j < global[1]; ++j) {
            REQUIRE(zs(i, j) == 0.0);
            REQUIRE(fs(i, j) == 2.5);
          }
      }
  }
}

TEST_CASE("factories take braces, constant layouts, and refuse a bad layout on every rank", "[tensor][factories]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  constexpr layout rows{shard("x"), replicated};
  dtensor<float, rows, Kokkos::HostSpace> const x = full<float, rows, Kokkos::HostSpace>(mesh, {2 * n + 1, 3}, 1.5f);
  REQUIRE(x.global_extents()[0] == 2 * n + 1);
  auto const back = gather(x);
  REQUIRE(std::all_of(back.data(), back.data() + back.size(), [](float v) { return v == 1.5f; }));
  auto const braces = zeros<int, Kokkos::HostSpace>(mesh, layout{cyclic(2, "x")}, {9});
  REQUIRE(braces.global_extents()[0] == 9);
  REQUIRE_THROWS_MATCHES(zeros<double>(mesh, layout{shard("y"), replicated}, {4, 4}), invalid_layout_error,
                         Catch::Matchers::MessageMatches(StartsWith("f64[4,4]: zeros: dimension 0 is sharded on axis "
                                                                    "\"y\", which the mesh lacks")));
  REQUIRE_THROWS_AS(full<double>(device_mesh{}, rows, {4, 4}, 1.0), invalid_mesh_error);
}

TEST_CASE("generate makes the elements a rank holds from their global indices, in the default space's memory",
          "[tensor][factories]") {
  for (mesh_shape const& shape : meshes()) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    for (layout const& l : layouts())
      for (std::array<std::size_t, 2> const global : std::vector<std::array<std::size_t, 2>>{{5, 7}, {1, 3}}) {
        INFO(to_string(l).view() << " on " << to_string(shape).view() << ", " << global[0] << "x" << global[1]);
        auto const x = generate<double>(mesh, l, global, KOKKOS_LAMBDA(std::size_t i) { return 0.5 + 2.0 * i; });
        REQUIRE(x.layout() == l);
        auto const back = gather(x);  // partial layouts reduced: each value once
        for (std::size_t i = 0; i < global[0]; ++i)
          for (std::size_t j = 0; j < global[1]; ++j)
            REQUIRE(back(i, j) == 0.5 + 2.0 * static_cast<double>(i * global[1] + j));
      }
    // Three dimensions, one dealt cyclically, converted to the element type.
    std::array<std::size_t, 3> const extents{2, 3, 5};
    auto const y = generate<float>(
        mesh, layout{replicated, shard("a"), cyclic(2, "b")}, extents,
        KOKKOS_LAMBDA(std::size_t i) { return static_cast<double>(i) / 4; });
    auto const all = gather(y);
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 3; ++j)
        for (std::size_t k = 0; k < 5; ++k) REQUIRE(all(i, j, k) == static_cast<float>((15 * i + 5 * j + k) / 4.0));
  }
  REQUIRE_THROWS_AS(
      generate<double>(
          device_mesh{}, layout{replicated}, std::array<std::size_t, 1>{4}, KOKKOS_LAMBDA(std::size_t) { return 0.0; }),
      invalid_mesh_error);
}

TEST_CASE("owned blocks carry the global indices of the values a rank holds", "[tensor][factories]") {
  for (mesh_shape const& shape : meshes()) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    for (layout l : layouts()) {
      l.partial_axes = {};  // values, not contributions
      l.op = reduce_op::sum;
      INFO(to_string(l).view() << " on " << to_string(shape).view());
      host_matrix const global = numbered(9, 7);
      auto const x = distribute<Kokkos::HostSpace>(mesh, l, global);
      std::size_t covered = 0;
      for (owned_block const& b : owned_blocks(x)) {
        for (std::size_t i = 0; i < b.extents[0]; ++i)
          for (std::size_t j = 0; j < b.extents[1]; ++j)
            REQUIRE(x.local()(b.local_offset[0] + i, b.local_offset[1] + j) ==
                    value_at(b.global_offset[0] + i, b.global_offset[1] + j));
        covered += b.extents[0] * b.extents[1];
      }
      REQUIRE(covered == x.local().size());
    }
  }
}

TEST_CASE("every operation on a moved-from or empty tensor raises empty_tensor_error naming it", "[tensor][moved]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  layout const rows{shard("x"), replicated};
  layout const cols{replicated, shard("x")};
  matrix x = full<double, Kokkos::HostSpace>(mesh, rows, {2 * n, 4}, 1.0);
  matrix const kept = std::move(x);
  matrix const other = full<double, Kokkos::HostSpace>(mesh, rows, {2 * n, 4}, 2.0);
  matrix into = zeros<double, Kokkos::HostSpace>(mesh, cols, {2 * n, 4});
  auto const square = full<double, Kokkos::HostSpace>(mesh, cols, {4, 4}, 1.0);
  auto const gain = full<double, Kokkos::HostSpace>(mesh, layout{replicated}, {4}, 1.0);
  auto const targets = zeros<int, Kokkos::HostSpace>(mesh, layout{shard("x")}, {2 * n});

  std::vector<std::pair<std::string, std::function<void()>>> const operations{
      {"redistribute", [&] { (void)redistribute(x, cols); }},
      {"redistribute", [&] { (void)redistribute_async(x, cols); }},
      {"redistribute", [&] { redistribute(x, into); }},
      {"redistribute", [&] { redistribute(kept, x); }},
      {"redistributor", [&] { (void)redistributor<double, 2, Kokkos::HostSpace>(x, cols); }},
      {"gather", [&] { (void)gather(x); }},
      {"to_layout", [&] { (void)ops::to_layout(x, cols); }},
      {"add", [&] { (void)ops::add(x, other); }},
      {"add", [&] { (void)ops::add(other, x); }},
      {"multiply", [&] { (void)ops::multiply(x, other); }},
      {"scale", [&] { (void)ops::scale(x, 2.0); }},
      {"gelu", [&] { (void)ops::gelu(x); }},
      {"softmax", [&] { (void)ops::softmax(x); }},
      {"sum", [&] { (void)ops::sum(x, 1); }},
      {"mean", [&] { (void)ops::mean(x, 1); }},
      {"reduce", [&] { (void)ops::reduce(x, 1, reduce_op::max); }},
      {"total", [&] { (void)ops::total(x); }},
      {"matmul", [&] { (void)ops::matmul(x, square); }},
      {"einsum", [&] { (void)ops::einsum<"ik,kj->ij">(x, square); }},
      {"einsum_add", [&] { ops::einsum_add<"ik,kj->ij">(x, other, square); }},
      {"layer_norm", [&] { (void)ops::layer_norm(x, gain, gain, 1e-5); }},
      {"rms_norm", [&] { (void)ops::rms_norm(x, gain, 1e-5); }},
      {"cross_entropy", [&] { (void)ops::cross_entropy(x, targets); }},
      {"owned_blocks", [&] { (void)owned_blocks(x); }},
      {"predicted_bytes", [&] { (void)predicted_bytes(x, cols); }},
      {"dtensor::mesh", [&] { (void)x.mesh(); }},
      {"dtensor::bound", [&] { (void)x.bound(); }},
  };
  for (auto const& [name, run] : operations) {
    INFO(name);
    REQUIRE_THROWS_MATCHES(run(), empty_tensor_error,
                           Catch::Matchers::MessageMatches(StartsWith(name + ": the tensor f64[") &&
                                                           ContainsSubstring("S(x),R was moved from")));
  }
  matrix const never;
  REQUIRE_THROWS_MATCHES(gather(never), empty_tensor_error,
                         Catch::Matchers::MessageMatches(StartsWith("gather: the tensor is empty")));
  // The tensor it moved to is whole, and a moved-from tensor can be assigned again.
  REQUIRE(gather(kept)(0, 0) == 1.0);
  x = other;
  REQUIRE(gather(x)(0, 0) == 2.0);
}

TEST_CASE("redistribution to an equal layout returns a copy on every mesh shape", "[tensor][aliasing]") {
  for (mesh_shape const& shape : meshes()) {
    device_mesh const mesh(MPI_COMM_WORLD, shape);
    // Equal as written, and equal only because an axis of extent 1 shards nothing.
    std::vector<std::pair<layout, layout>> pairs{
        {layout{shard("a"), shard("b")}, layout{shard("a"), shard("b")}},
        {layout{cyclic(2, "a"), replicated}, layout{cyclic(2, "a"), replicated}}};
    if (shape.extent(1) == 1) pairs.push_back({layout{shard("a"), shard("b")}, layout{shard("a"), replicated}});
    if (shape.extent(0) == 1) pairs.push_back({layout{shard("a"), shard("b")}, layout{replicated, shard("b")}});
    for (auto const& [from, to] : pairs) {
      INFO(to_string(from).view() << " -> " << to_string(to).view() << " on " << to_string(shape).view());
      auto const x = distribute<Kokkos::HostSpace>(mesh, from, numbered(6, 5));
      auto const y = redistribute(x, to);
      REQUIRE(y.layout() == to);
      if (x.local().size() > 0) REQUIRE(y.local().data() != x.local().data());
      Kokkos::deep_copy(y.local(), -1.0);  // writing the result leaves the input as it was
      auto const back = gather(x);
      for (std::size_t i = 0; i < 6; ++i)
        for (std::size_t j = 0; j < 5; ++j) REQUIRE(back(i, j) == value_at(i, j));
    }
  }
}

TEMPLATE_TEST_CASE("complex elements of either library through redistribution, gather and products",
                   "[tensor][complex]", Kokkos::complex<double>, std::complex<double>, Kokkos::complex<float>) {
  using C = TestType;
  using R = typename C::value_type;
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  std::size_t const m = n + 2, k = 3, cols = 2 * n + 1;
  Kokkos::View<C**, Kokkos::LayoutRight, Kokkos::HostSpace> a("a", m, k), b("b", k, cols);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p) a(i, p) = C(static_cast<R>(i + p), static_cast<R>(i) - static_cast<R>(p));
  for (std::size_t p = 0; p < k; ++p)
    for (std::size_t j = 0; j < cols; ++j) b(p, j) = C(static_cast<R>(j % 3), static_cast<R>(p + 1));
  auto const x = distribute<Kokkos::HostSpace>(mesh, layout{shard("x"), replicated}, a);
  REQUIRE(x.notation().starts_with(sizeof(R) == 8 ? "c128[" : "c64["));
  auto const moved = redistribute(x, layout{replicated, cyclic(2, "x")});
  auto const back = gather(moved);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p) REQUIRE(back(i, p) == a(i, p));
  // Small integer parts: the products are exact in any order of summation.
  auto const w = distribute<Kokkos::HostSpace>(mesh, layout{replicated, shard("x")}, b);
  auto const product = gather(ops::einsum<"ik,kj->ij">(x, w));
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      C expected(0, 0);
      for (std::size_t p = 0; p < k; ++p) expected += a(i, p) * b(p, j);
      REQUIRE(product(i, j) == expected);
    }
}

TEST_CASE("a transition's predicted bytes are what it moves, and no fewer than the lower bound", "[tensor][traffic]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  for (auto const& [from, to] : std::vector<std::pair<layout, layout>>{
           {layout{shard("x"), replicated}, layout{replicated, shard("x")}},
           {layout{shard("x"), replicated}, layout{replicated, replicated}},
           {layout{replicated, replicated}.partial(reduce_op::sum, "x"), layout{shard("x"), replicated}},
           {layout{cyclic(2, "x"), replicated}, layout{shard("x"), replicated}}}) {
    INFO(to_string(from).view() << " -> " << to_string(to).view());
    auto const x = full<double, Kokkos::HostSpace>(mesh, from, {2 * n + 1, 5}, 1.0);
    transition_bytes const predicted = predicted_bytes(x, to);
    REQUIRE(predicted.received.size() == n);
    mesh.counters().reset();
    (void)redistribute(x, to);
    REQUIRE(mesh.counters().total().bytes_received == predicted.received[mesh.rank()]);
    REQUIRE(*std::max_element(predicted.received.begin(), predicted.received.end()) >= predicted.lower_bound);
  }
  // One all-to-all of exactly what each rank lacks: at the lower bound.
  auto const x = full<double, Kokkos::HostSpace>(mesh, layout{shard("x"), replicated}, {2 * n, 2 * n}, 1.0);
  transition_bytes const swap = predicted_bytes(x, layout{replicated, shard("x")});
  REQUIRE(*std::max_element(swap.received.begin(), swap.received.end()) == swap.lower_bound);
  REQUIRE(swap.lower_bound == (n - 1) * 4 * sizeof(double));
  REQUIRE_THROWS_AS(predicted_bytes(x, layout{shard("y"), replicated}), invalid_layout_error);
}

TEST_CASE("bind on a mesh, and notation that did not parse, used anyway", "[tensor][notation]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  REQUIRE(bind(mesh, layout{shard("x")}) == bind(mesh.shape(), layout{shard("x")}));
  REQUIRE_THROWS_AS(bind(mesh, layout{shard("y")}), invalid_layout_error);
  auto const typo = parse_layout("S(x,R");
  REQUIRE(!typo.ok());
  REQUIRE_THROWS_MATCHES(
      typo.value(), notation_error,
      Catch::Matchers::MessageMatches(StartsWith("S(x,R: ") && ContainsSubstring("the text did not parse")));
}

TEST_CASE("ranks in different collectives raise mismatched_collective_error naming each", "[fingerprints]") {
  REQUIRE(detail::collectives_debugged());
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  vector v("v", 4);
  auto const run = [&] {
    if (mesh.rank() == 0)
      broadcast(mesh.comm(), v, 0, Kokkos::DefaultHostExecutionSpace{});
    else
      all_reduce(mesh.comm(), v, reduce_op::sum, Kokkos::DefaultHostExecutionSpace{});
  };
  REQUIRE_THROWS_MATCHES(
      run(), mismatched_collective_error,
      Catch::Matchers::MessageMatches(ContainsSubstring("collectives differ across the " + std::to_string(n) +
                                                        " ranks of a communicator: rank 0 runs broadcast f64 #") &&
                                      ContainsSubstring("rank 1 runs all_reduce f64 #")));
  all_ranks_continue();
}

TEST_CASE("an operation's fingerprint names the operation and its tensor", "[fingerprints]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  auto const x = full<double, Kokkos::HostSpace>(mesh, layout{shard("x"), replicated}, {2 * n, 3}, 1.0);
  auto const run = [&] {
    if (mesh.rank() == 0)
      (void)redistribute(x, layout{replicated, shard("x")});
    else
      (void)gather(x);
  };
  REQUIRE_THROWS_MATCHES(
      run(), mismatched_collective_error,
      Catch::Matchers::MessageMatches(
          ContainsSubstring("rank 0 runs agreement of redistribute") && ContainsSubstring("in redistribute f64[") &&
          ContainsSubstring("(called at ") && ContainsSubstring("research_api_test.cpp:") &&
          ContainsSubstring("rank 1 runs agreement of gather") && ContainsSubstring("in gather f64[")));
  all_ranks_continue();
  // Alike on every rank, the same operations run as without the debug mode.
  auto const y = redistribute(x, layout{replicated, shard("x")});
  auto const back = gather(y);
  REQUIRE(back(2 * n - 1, 2) == 1.0);
}

TEST_CASE("off unless asked: no fingerprint, no watchdog", "[tensor][off]") {
  REQUIRE(!detail::collectives_debugged());
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  auto const x = full<double, Kokkos::HostSpace>(mesh, layout{shard("x"), replicated}, {2 * n, 3}, 1.0);
  REQUIRE(gather(redistribute(x, layout{replicated, shard("x")}))(0, 0) == 1.0);
}

// Rank 0 enters a broadcast no other rank calls: the watchdog must report
// it, with the other ranks' states, and end the job.
TEST_CASE("a rank stuck in a collective is reported by the watchdog", "[watchdog]") {
  auto const n = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", n}});
  barrier(mesh.comm());
  vector v("v", 4);
  if (mesh.rank() == 0) broadcast(mesh.comm(), v, 0, Kokkos::DefaultHostExecutionSpace{});
}

}  // namespace research_api_test
