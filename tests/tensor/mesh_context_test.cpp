// A mesh owns its runtime state: copies of the handle share it, two meshes
// share none of it, tensors keep their mesh alive, submeshes are meshes of
// their own, and the memory ledger counts what the workspace leases.
#include "host_matrix.hpp"
#include "mpi_test.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <optional>
#include <thread>
#include <vector>

// Inside a namespace of its own: bundled with other test files into one translation unit.
namespace mesh_context_test {

using namespace shardmesh;
using Catch::Matchers::ContainsSubstring;

namespace {

using test::equal;
using test::host_matrix;
using test::numbered;
constexpr layout rows{shard("x"), replicated};
constexpr layout cols{replicated, shard("x")};

std::size_t world() { return static_cast<std::size_t>(test::world_size()); }

}  // namespace

TEST_CASE("copies of a mesh share its state; two meshes share none", "[runtime][context]") {
  device_mesh const a(MPI_COMM_WORLD, mesh_shape{{"x", world()}});
  device_mesh const b(MPI_COMM_WORLD, mesh_shape{{"x", world()}});
  device_mesh const copy = a;
  REQUIRE(copy == a);
  REQUIRE(a != b);  // built from one communicator, still two meshes
  REQUIRE(&copy.counters() == &a.counters());
  REQUIRE(&copy.ledger() == &a.ledger());
  REQUIRE(&a.counters() != &b.counters());
  REQUIRE(&a.ledger() != &b.ledger());
  REQUIRE(&workspace_of<Kokkos::HostSpace>(a) != &workspace_of<Kokkos::HostSpace>(b));

  std::size_t const n = 4 * world();
  host_matrix const global = numbered(n);
  a.counters().reset();
  b.counters().reset();
  std::size_t const b_plans = b.plans().size();
  auto const x = distribute<rows>(a, global);
  auto const y = redistribute<cols>(x);
  REQUIRE(equal(gather(y), global));
  if (world() > 1) REQUIRE(a.counters()["all_to_all"].calls == 1);
  REQUIRE(b.counters().total() == collective_count{});  // b saw none of a's traffic
  REQUIRE(b.plans().size() == b_plans);                 // nor its plans
  REQUIRE(a.plans().size() > 0);
  REQUIRE(b.ledger().peak(memory_category::workspace) == 0);
}

TEST_CASE("a tensor outlives the scope that built its mesh", "[runtime][context]") {
  std::size_t const n = 3 * world() + 1;
  host_matrix const global = numbered(n);
  std::optional<dtensor<double, rows>> kept;
  {
    device_mesh const scoped(MPI_COMM_WORLD, mesh_shape{{"x", world()}});
    kept = distribute<rows>(scoped, global);
  }  // the handle is gone; the tensor holds the mesh
  auto const y = redistribute<cols>(*kept);
  REQUIRE(y.mesh() == kept->mesh());
  REQUIRE(equal(gather(y), global));
  REQUIRE(equal(gather(*kept, 0), test::world_rank() == 0 ? global : host_matrix()));
}

TEST_CASE("a submesh is the mesh of this rank's slice along some axes", "[runtime][submesh]") {
  if (world() % 2 != 0) return;
  std::size_t const half = world() / 2;
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"pp", 2}, {"tp", half}});
  device_mesh const stage = mesh.submesh({"tp"});
  REQUIRE(stage == mesh.submesh(axis_set::of(1)));  // cached: the same mesh
  REQUIRE(stage != mesh);
  REQUIRE(stage.shape() == mesh_shape{{"tp", half}});
  REQUIRE(stage.size() == half);
  REQUIRE(stage.rank() == mesh.coordinates()[1]);
  REQUIRE(stage.comm().size() == static_cast<int>(half));

  // Its members are the ranks at this rank's "pp" coordinate.
  long const mine = test::world_rank();
  long sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, stage.comm().get());
  long expected = 0;
  for (std::size_t i = 0; i < half; ++i)
    expected += static_cast<long>(group_member(mesh.shape(), axis_set::of(1), mesh.rank(), i));
  REQUIRE(sum == expected);

  // A tensor lives on the stage alone; the stage's traffic and memory are this rank's.
  mesh.counters().reset();
  std::size_t const n = 4 * half;
  host_matrix const global = numbered(n);
  auto const x = distribute(stage, layout{shard("tp"), replicated}, global);
  auto const y = redistribute(x, layout{replicated, shard("tp")});
  REQUIRE(equal(gather(y), global));
  if (half > 1) {
    REQUIRE(mesh.counters()["all_to_all"].calls == 1);
    REQUIRE(&stage.counters() == &mesh.counters());
  }
  REQUIRE(&stage.ledger() == &mesh.ledger());
}

TEST_CASE("a submesh of axes the mesh lacks is an error on every rank", "[runtime][submesh][errors]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", world()}});
  REQUIRE_THROWS_MATCHES(mesh.submesh({"pp"}), invalid_mesh_error,
                         Catch::Matchers::MessageMatches(ContainsSubstring("has no axis \"pp\"")));
  REQUIRE_THROWS_AS(mesh.submesh(axis_set{}), invalid_mesh_error);
  if (world() > 1) {
    device_mesh const grid(MPI_COMM_WORLD, mesh_shape{{"a", 1}, {"b", world()}});
    axis_set const asked = test::world_rank() == 1 ? axis_set::of(0) : axis_set::of(1);
    REQUIRE_THROWS_MATCHES(grid.submesh(asked), invalid_mesh_error,
                           Catch::Matchers::MessageMatches(ContainsSubstring("rank 1 asked for other axes")));
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every rank got here
}

TEST_CASE("the memory ledger keeps categories, high-water marks and entries", "[runtime][ledger]") {
  memory_ledger ledger;
  ledger.allocate(memory_category::parameters, 100);
  ledger.allocate(memory_category::activations, 50);
  ledger.release(memory_category::activations, 50);
  ledger.allocate(memory_category::gradients, 30);
  REQUIRE(ledger.current(memory_category::parameters) == 100);
  REQUIRE(ledger.current(memory_category::activations) == 0);
  REQUIRE(ledger.peak(memory_category::activations) == 50);
  REQUIRE(ledger.current_total() == 130);
  REQUIRE(ledger.peak_total() == 150);  // the most at once, not the sum of the peaks (180)
  ledger.reset_peaks();
  REQUIRE(ledger.peak(memory_category::activations) == 0);
  REQUIRE(ledger.peak_total() == 130);

  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", world()}});
  {
    ledger_entry held = mesh.track(memory_category::optimizer_state, 64);
    ledger_entry moved;
    moved = std::move(held);
    REQUIRE(held.bytes() == 0);
    REQUIRE(mesh.ledger().current(memory_category::optimizer_state) == 64);
    REQUIRE(moved.bytes() == 64);
  }
  REQUIRE(mesh.ledger().current(memory_category::optimizer_state) == 0);
  REQUIRE(to_string(memory_category::optimizer_state) == "optimizer state");
}

TEST_CASE("workspace leases show in the ledger", "[runtime][ledger]") {
  if (world() < 2) return;
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", world()}});
  // Gathering the columns of an uneven matrix unpacks through the workspace.
  std::size_t const n = 5 * world() + 3;
  host_matrix const global = numbered(n);
  auto const x = distribute<cols>(mesh, global);
  auto& pool = workspace_of<Kokkos::DefaultExecutionSpace::memory_space>(mesh);
  mesh.ledger().reset_peaks();
  pool.reset_peak();
  auto const y = redistribute_async<layout{replicated, replicated}>(x).get();
  REQUIRE(pool.peak_leased_bytes() > 0);
  REQUIRE(mesh.ledger().peak(memory_category::workspace) == pool.peak_leased_bytes());
  REQUIRE(mesh.ledger().current(memory_category::workspace) == 0);
  REQUIRE(pool.leased_bytes() == 0);
  REQUIRE(equal(gather(y), global));
}

TEST_CASE("a mesh's counters, ledger and plans may be used from several threads", "[runtime][context]") {
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", world()}});
  mesh.counters().reset();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        mesh.counters().record("test", 1, 2);
        ledger_entry const e = mesh.track(memory_category::activations, 8);
        auto const p = mesh.plan(bind(mesh.shape(), rows), bind(mesh.shape(), cols));
        (void)p;
      }
    });
  for (auto& t : threads) t.join();
  REQUIRE(mesh.counters()["test"] == collective_count{4000, 4000, 8000});
  REQUIRE(mesh.ledger().current(memory_category::activations) == 0);
  REQUIRE(mesh.ledger().peak(memory_category::activations) >= 8);
  REQUIRE(mesh.ledger().peak(memory_category::activations) <= 32);
}

}  // namespace mesh_context_test
