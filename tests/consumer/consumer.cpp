// A user's program: includes the umbrella header, links shardmesh::shardmesh,
// and checks it got the version its build asked for.
#include <shardmesh/shardmesh.hpp>

#include <cstdio>

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  bool ok = false;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    auto const info = shardmesh::query_runtime_info();
    ok = info.shardmesh_version == SHARDMESH_EXPECTED_VERSION && info.concurrency >= 1;
    std::printf("consumer: %s: %s\n", shardmesh::to_string(info).c_str(), ok ? "ok" : "version mismatch");
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
