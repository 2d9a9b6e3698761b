// A distributed matrix product, C = A B, on block-cyclic operands: the
// algebra chooses how to run it (gathering whole panels, or SUMMA's strips
// when the panels would take more memory than an operand) and says so; the
// memory ledger shows the workspace it took. Some entries of C are checked
// against dot products of the serial matrices.
//
//   mpiexec -n 4 build/release/examples/distributed_product [m k n] [block]
#include <shardmesh/shardmesh.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace shardmesh;

namespace {

using matrix = dynamic_dtensor<double, 2, Kokkos::HostSpace>;

double a_at(std::size_t i, std::size_t k) { return std::sin(static_cast<double>(i * 7 + k)); }
double b_at(std::size_t k, std::size_t j) { return std::cos(static_cast<double>(k + 3 * j)); }

// A matrix of this layout filled in global indices, through the blocks this rank owns.
template <class Value>
matrix filled(device_mesh const& mesh, layout const& l, std::size_t rows, std::size_t cols, Value value) {
  matrix x = empty<double, Kokkos::HostSpace>(mesh, l, {rows, cols});
  for (owned_block const& b : owned_blocks(x))
    for (std::size_t i = 0; i < b.extents[0]; ++i)
      for (std::size_t j = 0; j < b.extents[1]; ++j)
        x.local()(b.local_offset[0] + i, b.local_offset[1] + j) = value(b.global_offset[0] + i, b.global_offset[1] + j);
  return x;
}

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    try {
      std::size_t const m = argc > 3 ? std::strtoull(argv[1], nullptr, 10) : 1000;
      std::size_t const k = argc > 3 ? std::strtoull(argv[2], nullptr, 10) : 999;
      std::size_t const n = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1001;
      std::size_t const block = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 64;
      int ranks = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &ranks);
      std::size_t const rows = ranks % 2 == 0 ? 2 : 1;
      device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"r", rows}, {"c"}});
      layout const blocks{cyclic(block, "r"), cyclic(block, "c")};
      matrix const a = filled(mesh, blocks, m, k, a_at);
      matrix const b = filled(mesh, blocks, k, n, b_at);

      // The complete product, delivered in the operands' block-cyclic layout.
      op_layouts const plan = ops::planned_product<"ik,kj->ij">(a, b, &blocks);
      mesh.ledger().reset_peaks();
      std::size_t const before = mesh.ledger().current(memory_category::workspace);
      MPI_Barrier(MPI_COMM_WORLD);
      auto const start = std::chrono::steady_clock::now();
      matrix const c = ops::einsum<"ik,kj->ij">(a, b, blocks);
      double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // The ledger's workspace holds op results too: what the product took beside its result.
      std::size_t const workspace =
          mesh.ledger().peak(memory_category::workspace) - before - c.local().size() * sizeof(double);

      // Entries of C in global indices, against the serial dot products.
      double error = 0;
      for (owned_block const& blk : owned_blocks(c))
        for (std::size_t i = 0; i < blk.extents[0]; i += 17)
          for (std::size_t j = 0; j < blk.extents[1]; j += 13) {
            double dot = 0;
            for (std::size_t p = 0; p < k; ++p)
              dot += a_at(blk.global_offset[0] + i, p) * b_at(p, blk.global_offset[1] + j);
            error = std::max(error, std::abs(c.local()(blk.local_offset[0] + i, blk.local_offset[1] + j) - dot));
          }
      MPI_Allreduce(MPI_IN_PLACE, &error, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      double const tolerance = 1e-12 * static_cast<double>(k);
      bool const ok = error < tolerance;
      if (mesh.rank() == 0) {
        std::printf("%s times %s on mesh %s\n", a.notation().c_str(), b.notation().c_str(),
                    to_string(mesh.shape()).chars);
        std::printf("algorithm: %s", std::string(to_string(plan.algorithm)).c_str());
        if (plan.algorithm != product_algorithm::gather) std::printf(" in strips of %zu", plan.strip);
        if (plan.strip_tiles > 1) std::printf(", each in %zu tiles", plan.strip_tiles);
        std::printf("; result %s\n", c.notation().c_str());
        std::printf("workspace: %zu B planned, %zu B taken on rank 0 (beside %zu B of operand shards)\n",
                    static_cast<std::size_t>(plan.workspace * sizeof(double)), workspace,
                    (a.local().size() + b.local().size()) * sizeof(double));
        std::printf("%.3f s; sampled entries against the serial dot products: max error %.2e: %s\n", seconds, error,
                    ok ? "passed" : "FAILED");
      }
      status = ok ? 0 : 1;
    } catch (shardmesh::error const& e) {
      std::fprintf(stderr, "distributed_product: %s\n", e.what());
      status = 1;
    }
  }
  MPI_Finalize();
  return status;
}
