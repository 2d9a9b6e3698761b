// A persistent redistributor run with other tensors than it was made for on
// one rank only: the other ranks go on into the plan's collective, so the
// job must end with a message naming the rank, never hang. Run only by
// tensor.redistributor_misuse.*, which expect exactly that.
#include "mpi_test.hpp"

#include <shardmesh/shardmesh.hpp>

#include <catch2/catch_test_macros.hpp>

#include <tuple>

using namespace shardmesh;

namespace {

using matrix = dynamic_dtensor<double, 2>;

matrix make(device_mesh const& mesh, layout const& l, tensor_index const& global) {
  return matrix(mesh, l, {global[0], global[1]},
                detail::allocate<matrix::view_type>(
                    "x", local_extents(mesh.shape(), bind(mesh.shape(), l), global, mesh.rank())));
}

// Runs a rows-to-columns redistributor on every rank; the last rank passes
// what pick(x, y, wide, rows_too, overlapping) gives instead of (x, y).
// Every tensor is made on every rank first: making one is collective.
template <class Pick>
void misuse(Pick&& pick) {
  auto const ranks = static_cast<std::size_t>(test::world_size());
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"dp", ranks}});
  layout const rows{shard("dp"), replicated};
  layout const cols{replicated, shard("dp")};
  tensor_index const global{2 * ranks, 2 * ranks};
  matrix const x = make(mesh, rows, global);
  matrix y = make(mesh, cols, global);
  matrix const wide = make(mesh, rows, {2 * ranks, 4 * ranks});
  matrix rows_too = make(mesh, rows, global);
  matrix overlapping(mesh, cols, {global[0], global[1]},
                     matrix::view_type(x.local().data(), y.local().extent(0), y.local().extent(1)));
  redistributor const to_cols(x, cols);
  to_cols(x, y);  // what it was made for
  if (test::world_rank() == test::world_size() - 1) {
    auto [in, out] = pick(x, y, wide, rows_too, overlapping);
    to_cols(in, out);
  } else {
    to_cols(x, y);
  }
}

}  // namespace

TEST_CASE("an input of other extents on the last rank", "[.][input]") {
  misuse([](matrix const&, matrix& y, matrix const& wide, matrix&, matrix&) { return std::tie(wide, y); });
}

TEST_CASE("an output in another layout on the last rank", "[.][output]") {
  misuse([](matrix const& x, matrix&, matrix const&, matrix& rows_too, matrix&) { return std::tie(x, rows_too); });
}

TEST_CASE("an output that overlaps the input on the last rank", "[.][overlap]") {
  misuse(
      [](matrix const& x, matrix&, matrix const&, matrix&, matrix& overlapping) { return std::tie(x, overlapping); });
}
