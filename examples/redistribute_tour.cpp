// A tour of layouts: on 4 ranks as a 2x2 mesh (dp x tp), an 8x6 matrix walks
// through sharded, transposed, two-axis, block-cyclic, replicated and partial
// layouts. Each move prints the plan the algebra chose and checks the result
// against the serial matrix.
//
//   mpiexec -n 4 build/release/examples/redistribute_tour
#include <shardmesh/shardmesh.hpp>

#include <cstdio>
#include <string>

using namespace shardmesh;

namespace {

using matrix = dynamic_dtensor<float, 2>;
using host_matrix = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;

bool equal(host_matrix const& a, host_matrix const& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a.data()[i] != b.data()[i]) return false;
  return true;
}

// Moves x to `to`, prints the plan and whether the whole matrix is intact.
matrix move(matrix const& x, layout const& to, host_matrix const& serial, bool& ok) {
  auto pending = redistribute_async(x, to);
  std::string const plan = to_string(x.mesh().shape(), pending.plan(), "  ");
  matrix y = pending.get();
  bool const intact = equal(gather(y), serial);
  ok = ok && intact;
  if (x.mesh().rank() == 0)
    std::printf("%s -> %s\n%s  check against the serial matrix: %s\n\n", x.notation().c_str(),
                std::string(to_string(to).view()).c_str(), plan.empty() ? "  (nothing to do)\n" : plan.c_str(),
                intact ? "passed" : "FAILED");
  return y;
}

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  bool ok = true;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    try {
      device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", 2}, {"tp", 2}});
      host_matrix serial("serial", 8, 6);
      for (std::size_t i = 0; i < serial.size(); ++i) serial.data()[i] = static_cast<float>(i);

      matrix x = distribute(mesh, layout{shard("dp"), replicated}, serial, 0);
      if (mesh.rank() == 0)
        std::printf("%s on mesh %s, from rank 0\n\n", x.notation().c_str(), to_string(mesh.shape()).chars);
      for (layout const& to : {
               layout{replicated, shard("dp")},                               // transposed sharding
               layout{shard("dp"), shard("tp")},                              // two axes, two dimensions
               layout{shard("dp", "tp"), replicated},                         // two axes, one dimension
               layout{cyclic(2, "tp"), shard("dp")},                          // block-cyclic
               layout{replicated, replicated},                                // replicated
               layout{replicated, replicated}.partial(reduce_op::sum, "tp"),  // partial sums
               layout{shard("tp"), shard("dp")},                              // reduce-scatter onto shards
               layout{shard("dp"), replicated},                               // and back
           })
        x = move(x, to, serial, ok);
    } catch (error const& e) {  // e.g. not 4 ranks: the same message on every rank
      int rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      if (rank == 0) std::fprintf(stderr, "redistribute_tour: %s\n", e.what());
      ok = false;
    }
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
