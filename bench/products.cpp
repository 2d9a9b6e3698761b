// Distributed matrix products against ScaLAPACK, side by side in one run:
//
//   product/<mesh>/<n>/<impl>  C = A B of n x n doubles; A, B and C
//       block-cyclic in 64 x 64 blocks over the mesh's rows and columns:
//         shardmesh  ops::einsum<"ik,kj->ij">(a, b, blocks), run as the
//                    algebra chooses (SUMMA for these shapes)
//         shardmesh_at_pdgemm_memory  the same with the mesh's workspace
//                    limit set to what pdgemm took beside its arrays
//         pdgemm     ScaLAPACK's pdgemm on the same local arrays: they are
//                    its column-major arrays of the transposes, so it
//                    computes C^T = B^T A^T on the mesh's grid transposed
//
// Time: the slowest rank's per product. Counters: workspace_bytes, the most
// heap a rank held beyond its operands and its result during one product
// (every allocation of the process counted: ours, ScaLAPACK's, MPI's; our
// workspace and result pools emptied first; C's, for shardmesh, as much as a
// new tensor of its layout takes), the largest over ranks; operand_bytes, A's
// and B's shards on the busiest rank. A pdgemm case fails if its C differs
// from shardmesh's by more than n epsilon relative to the largest entry.
#include "deferred_registration.hpp"
#include "heap_peak.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"

#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

// ScaLAPACK's C-callable entry points (it ships no header for them).
extern "C" {
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, char const* order, int rows, int columns);
void Cblacs_gridexit(int context);
void descinit_(int* desc, int const* m, int const* n, int const* mb, int const* nb, int const* row_source,
               int const* column_source, int const* context, int const* leading, int* info);
void pdgemm_(char const* transa, char const* transb, int const* m, int const* n, int const* k, double const* alpha,
             double const* a, int const* ia, int const* ja, int const* desca, double const* b, int const* ib,
             int const* jb, int const* descb, double const* beta, double* c, int const* ic, int const* jc,
             int const* descc);
}

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using matrix = dynamic_dtensor<double, 2, host>;

constexpr std::size_t block = 64;

matrix filled(device_mesh const& mesh, layout const& l, std::size_t n, std::size_t seed) {
  matrix x = empty<double, host>(mesh, l, {n, n});
  for (owned_block const& b : owned_blocks(x))
    for (std::size_t i = 0; i < b.extents[0]; ++i)
      for (std::size_t j = 0; j < b.extents[1]; ++j)
        x.local()(b.local_offset[0] + i, b.local_offset[1] + j) =
            std::sin(static_cast<double>((b.global_offset[0] + i) * 7 + (b.global_offset[1] + j) * 3 + seed));
  return x;
}

// pdgemm on the local arrays of a, b and c: C^T = B^T A^T with the grid
// transposed (process row = the mesh's column coordinate); column-major grid
// order numbers its processes as the mesh numbers its ranks.
class scalapack_product {
 public:
  scalapack_product(mesh_shape const& shape, matrix const& a, matrix const& b, matrix const& c) : a_(a), b_(b), c_(c) {
    Cblacs_get(-1, 0, &context_);
    Cblacs_gridinit(&context_, "C", static_cast<int>(shape[1].extent), static_cast<int>(shape[0].extent));
    describe(desc_a_, a);
    describe(desc_b_, b);
    describe(desc_c_, c);
  }
  scalapack_product(scalapack_product const&) = delete;
  scalapack_product& operator=(scalapack_product const&) = delete;
  ~scalapack_product() { Cblacs_gridexit(context_); }

  void operator()() const {
    int const n = static_cast<int>(a_.global_extents()[0]), one = 1;
    double const alpha = 1, beta = 0;
    pdgemm_("N", "N", &n, &n, &n, &alpha, b_.local().data(), &one, &one, desc_b_, a_.local().data(), &one, &one,
            desc_a_, &beta, c_.local().data(), &one, &one, desc_c_);
  }

 private:
  // x's transpose, n x n in block x block tiles; its leading dimension is x's local row length.
  void describe(int* desc, matrix const& x) const {
    int const n = static_cast<int>(x.global_extents()[0]), nb = static_cast<int>(block), zero = 0;
    int const leading = std::max<int>(1, static_cast<int>(x.local().extent(1)));
    int info = 0;
    descinit_(desc, &n, &n, &nb, &nb, &zero, &zero, &context_, &leading, &info);
  }

  matrix a_, b_, c_;
  int context_ = -1;
  int desc_a_[9] = {}, desc_b_[9] = {}, desc_c_[9] = {};
};

// The most heap this rank holds beyond what it held before, during run().
template <class Run>
double extra_heap(Run&& run) {
  MPI_Barrier(MPI_COMM_WORLD);
  std::int64_t const before = heap::in_use();
  heap::reset_peak();
  run();
  return max_over_ranks(static_cast<double>(heap::peak() - before));
}

double largest_difference(matrix const& x, matrix const& y) {
  double d = 0, scale = 0;
  for (std::size_t i = 0; i < x.local().size(); ++i) {
    d = std::max(d, std::abs(x.local().data()[i] - y.local().data()[i]));
    scale = std::max(scale, std::abs(y.local().data()[i]));
  }
  MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &scale, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return scale > 0 ? d / scale : d;
}

enum class impl { shardmesh, shardmesh_at_pdgemm_memory, pdgemm };

void product_case(benchmark::State& state, mesh_shape const& shape, std::size_t n, impl which) {
  device_mesh const mesh(MPI_COMM_WORLD, shape);
  layout const blocks{cyclic(block, "r"), cyclic(block, "c")};
  matrix const a = filled(mesh, blocks, n, 0);
  matrix const b = filled(mesh, blocks, n, 1);
  matrix const c = zeros<double, host>(mesh, blocks, {n, n});
  scalapack_product const pdgemm(shape, a, b, c);
  auto const product = [&] { return ops::einsum<"ik,kj->ij">(a, b, blocks); };
  if (which == impl::pdgemm) {
    time_max_over_ranks(state, pdgemm);
    state.counters["workspace_bytes"] = extra_heap(pdgemm);
    double const tolerance = static_cast<double>(n) * std::numeric_limits<double>::epsilon();
    if (double const d = largest_difference(c, product()); d > tolerance)
      state.SkipWithError("pdgemm's C differs from shardmesh's by " + std::to_string(d) + " relative");
  } else {
    if (which == impl::shardmesh_at_pdgemm_memory) {  // the workspace limit: what pdgemm takes beside its arrays
      compute_cost_model model;
      model.workspace_limit = static_cast<std::uint64_t>(extra_heap(pdgemm)) / sizeof(double);
      ops::set_compute_cost_model(mesh, model);
    }
    time_max_over_ranks(state, [&] { benchmark::DoNotOptimize(product()); });
    workspace_of<host>(mesh).release_all();  // the pools' memory counts: they start empty
    ops::release_cached_results(mesh);
    // The heap a tensor of C's layout takes (its shard and its bookkeeping), what pdgemm's C is beside it.
    double const result = extra_heap([&] { benchmark::DoNotOptimize(empty<double, host>(mesh, blocks, {n, n})); });
    state.counters["workspace_bytes"] = extra_heap([&] { benchmark::DoNotOptimize(product()); }) - result;
  }
  state.counters["operand_bytes"] = max_over_ranks(static_cast<double>((a.local().size() + b.local().size()) * 8));
  state.counters["flops_per_rank"] = 2.0 * static_cast<double>(n * n * n) / static_cast<double>(shape.size());
}

void register_all() {
  std::size_t const ranks = world_size();
  std::vector<mesh_shape> meshes;
  if (ranks == 2) meshes = {mesh_shape{{"r", 2}, {"c", 1}}, mesh_shape{{"r", 1}, {"c", 2}}};
  if (ranks == 4) meshes = {mesh_shape{{"r", 2}, {"c", 2}}};
  if (ranks == 8) meshes = {mesh_shape{{"r", 2}, {"c", 4}}};
  std::array<std::pair<impl, char const*>, 3> const impls{
      {{impl::shardmesh, "shardmesh"},
       {impl::shardmesh_at_pdgemm_memory, "shardmesh_at_pdgemm_memory"},
       {impl::pdgemm, "pdgemm"}}};
  for (std::size_t round = 0; round < rounds(); ++round)
    for (mesh_shape const& shape : meshes)
      for (std::size_t n : {1024, 2048})
        for (auto const& [which, label] : impls) {
          std::string const name = "product/" + std::to_string(shape[0].extent) + "x" +
                                   std::to_string(shape[1].extent) + "/" + std::to_string(n) + "/" + label +
                                   (rounds() > 1 ? "/round:" + std::to_string(round) : "");
          benchmark::RegisterBenchmark(name,
                                       [shape, n, which](benchmark::State& s) { product_case(s, shape, n, which); })
              ->UseManualTime()
              ->Iterations(n >= 2048 ? 3 : 10)
              ->Unit(benchmark::kMillisecond);
        }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
