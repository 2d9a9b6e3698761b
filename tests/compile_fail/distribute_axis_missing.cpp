#include <shardmesh/shardmesh.hpp>

using namespace shardmesh;

auto f(static_mesh<mesh_shape{{"dp"}}> const& mesh, Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace> g) {
  return distribute<layout{shard("tp"), replicated}>(mesh, g);
}
