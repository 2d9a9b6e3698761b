// Instantiates the main entry points, so that the strict warning flags see
// the templates' bodies and not only their declarations.
#include <shardmesh/shardmesh.hpp>

namespace {

using namespace shardmesh;

constexpr mesh_shape grid{{"dp", 2}, {"tp", 2}};
constexpr layout rows{shard("tp"), replicated};
constexpr layout cols{replicated, shard("tp")};
static_assert(static_plan<grid, rows, cols>().size() == 1);

[[maybe_unused]] void use(Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> global) {
  device_mesh const mesh(MPI_COMM_WORLD, grid);
  dtensor<float, rows> const x = distribute<rows>(mesh, global);
  dtensor<float, cols> y = redistribute<cols>(x);
  redistribute(x, y);
  auto pending = redistribute_async<rows>(y);
  dtensor<float, rows> const z = pending.get();
  dynamic_dtensor<double, 2> const d =
      distribute(mesh, layout{shard("dp"), cyclic(2, "tp")},
                 Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>("g", 8, 8), 0);
  auto const partial = redistribute(d, layout{replicated, replicated}.partial(reduce_op::sum, "dp"));
  auto const gathered = gather(partial, 0);
  redistributor<double, 2, Kokkos::DefaultExecutionSpace::memory_space> const back(partial, d.layout());
  dynamic_dtensor<double, 2> e = redistribute(partial, d.layout());
  back(partial, e);
  (void)gathered;
  (void)z;
  device_mesh const stage = mesh.submesh({"tp"});
  Kokkos::View<float*, Kokkos::HostSpace> a("a", 4), b("b", 8);
  all_gather(stage.comm(), a, b);
  all_reduce(stage.comm(), a, reduce_op::max);
  ledger_entry const held = mesh.track(memory_category::activations, 64);
  (void)held;
}

}  // namespace
