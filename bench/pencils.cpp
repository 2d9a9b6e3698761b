// A spectral code's transposes of an n^3 field of complex doubles over the
// P ranks of a 1-D mesh "x" (slabs: b = n / P planes per rank), side by
// side in one run:
//
//   pencil/<P>/<n>/contiguous/shardmesh  [S(x),R,R] -> [R,S(x),R]: each rank
//       sends runs of b n elements and receives whole blocks (through a
//       redistributor, as below; MPI_Alltoallv, nothing to choose)
//   pencil/<P>/<n>/strided/<impl>  [R,S(x),R] -> [R,R,S(x)]: the same bytes,
//       in runs of b elements on both sides (the innermost dimension is cut)
//         shardmesh    a redistributor (what a time loop runs: checked
//                      once on every rank, then only the plan's kernels and
//                      collectives) into the output's memory, by
//                      MPI_Alltoallw on datatypes or through a node window
//                      (either stores) as the mesh measured faster on its
//                      first call
//                      (counter chosen: 1 datatypes, 2 node window,
//                      3 with streaming stores)
//         shardmesh_datatypes, shardmesh_node_window,
//         shardmesh_node_window_streaming  each forced (the window's copies
//                      storing through the cache, or streaming past it)
//         alltoallw    by hand with MPI derived datatypes: a subarray type
//                      per peer on each side, one MPI_Alltoallw, no packing
//         hand_packed  by hand: pack loops into one buffer per peer,
//                      MPI_Alltoall, unpack loops
//
// Time: the slowest rank's per transpose, after one untimed call. Every case checks its result
// against the field's values in global indices.
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"

#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <array>
#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using complex = Kokkos::complex<double>;
using field = dynamic_dtensor<complex, 3, host>;

complex value_at(std::size_t i, std::size_t j, std::size_t k) {
  return {static_cast<double>(i * 1000003 + j * 1009 + k), static_cast<double>(k * 7 + 1)};
}

field filled(device_mesh const& mesh, layout const& l, std::size_t n) {
  field f = empty<complex, host>(mesh, l, {n, n, n});
  for (owned_block const& blk : owned_blocks(f))
    for (std::size_t i = 0; i < blk.extents[0]; ++i)
      for (std::size_t j = 0; j < blk.extents[1]; ++j)
        for (std::size_t k = 0; k < blk.extents[2]; ++k)
          f.local()(blk.local_offset[0] + i, blk.local_offset[1] + j, blk.local_offset[2] + k) =
              value_at(blk.global_offset[0] + i, blk.global_offset[1] + j, blk.global_offset[2] + k);
  return f;
}

bool holds_field(field const& f) {
  bool ok = true;
  for (owned_block const& blk : owned_blocks(f))
    for (std::size_t i = 0; i < blk.extents[0]; ++i)
      for (std::size_t j = 0; j < blk.extents[1]; ++j)
        for (std::size_t k = 0; k < blk.extents[2]; ++k)
          ok = ok && f.local()(blk.local_offset[0] + i, blk.local_offset[1] + j, blk.local_offset[2] + k) ==
                         value_at(blk.global_offset[0] + i, blk.global_offset[1] + j, blk.global_offset[2] + k);
  int all = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

// [R,S(x),R] (n x b x n) to [R,R,S(x)] (n x n x b) with one subarray type per peer on each side.
class alltoallw_transpose {
 public:
  alltoallw_transpose(std::size_t n, std::size_t ranks) : counts_(ranks, 1), displacements_(ranks, 0) {
    int const e = static_cast<int>(n), b = static_cast<int>(n / ranks);
    for (std::size_t q = 0; q < ranks; ++q) {
      int const at = static_cast<int>(q) * b;
      std::array<int, 3> const in_sizes{e, b, e}, out_sizes{e, e, b}, block{e, b, b};
      std::array<int, 3> const send_start{0, 0, at}, receive_start{0, at, 0};
      send_.push_back(subarray(in_sizes, block, send_start));
      receive_.push_back(subarray(out_sizes, block, receive_start));
    }
  }
  alltoallw_transpose(alltoallw_transpose const&) = delete;
  alltoallw_transpose& operator=(alltoallw_transpose const&) = delete;
  ~alltoallw_transpose() {
    for (MPI_Datatype& t : send_) MPI_Type_free(&t);
    for (MPI_Datatype& t : receive_) MPI_Type_free(&t);
  }

  void operator()(field const& in, field const& out) const {
    MPI_Alltoallw(in.local().data(), counts_.data(), displacements_.data(), send_.data(), out.local().data(),
                  counts_.data(), displacements_.data(), receive_.data(), MPI_COMM_WORLD);
  }

 private:
  static MPI_Datatype subarray(std::array<int, 3> const& sizes, std::array<int, 3> const& block,
                               std::array<int, 3> const& start) {
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Type_create_subarray(3, sizes.data(), block.data(), start.data(), MPI_ORDER_C, MPI_CXX_DOUBLE_COMPLEX, &t);
    MPI_Type_commit(&t);
    return t;
  }

  std::vector<int> counts_, displacements_;
  std::vector<MPI_Datatype> send_, receive_;
};

// The same transpose packed by hand: peer q's block is in[:, :, q b : q b + b], runs of b elements.
void hand_packed(field const& in, field const& out, std::vector<complex>& send, std::vector<complex>& receive,
                 std::size_t n, std::size_t ranks) {
  std::size_t const b = n / ranks, run = b * sizeof(complex);
  complex const* const from = in.local().data();
  complex* const to = out.local().data();
  for (std::size_t q = 0; q < ranks; ++q)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < b; ++j)
        std::memcpy(&send[((q * n + i) * b + j) * b], from + (i * b + j) * n + q * b, run);
  int const block = static_cast<int>(n * b * b);
  MPI_Alltoall(send.data(), block, MPI_CXX_DOUBLE_COMPLEX, receive.data(), block, MPI_CXX_DOUBLE_COMPLEX,
               MPI_COMM_WORLD);
  for (std::size_t s = 0; s < ranks; ++s)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < b; ++j)
        std::memcpy(to + (i * n + s * b + j) * b, &receive[((s * n + i) * b + j) * b], run);
}

void pencil_case(benchmark::State& state, std::size_t n, bool strided, std::string const& impl) {
  std::size_t const ranks = world_size();
  device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"x", ranks}});
  layout const from = strided ? layout{replicated, shard("x"), replicated} : layout{shard("x"), replicated, replicated};
  layout const to = strided ? layout{replicated, replicated, shard("x")} : layout{replicated, shard("x"), replicated};
  field const in = filled(mesh, from, n);
  field out = empty<complex, host>(mesh, to, {n, n, n});
  std::function<void()> run;
  alltoallw_transpose const transpose(n, ranks);
  std::vector<complex> send, receive;
  if (impl == "alltoallw") {
    run = [&] { transpose(in, out); };
  } else if (impl == "hand_packed") {
    send.resize(in.local().size());
    receive.resize(in.local().size());
    run = [&] { hand_packed(in, out, send, receive, n, ranks); };
  } else {
    if (impl == "shardmesh_datatypes") mesh.state<collective_tuning>().prefer(strided_all_to_all_algorithm::datatypes);
    if (impl == "shardmesh_node_window")
      mesh.state<collective_tuning>().prefer(strided_all_to_all_algorithm::node_window);
    if (impl == "shardmesh_node_window_streaming")
      mesh.state<collective_tuning>().prefer(strided_all_to_all_algorithm::node_window_streaming);
    run = [&, to_pencils = std::make_shared<redistributor<complex, 3, host> const>(in, to)] { (*to_pencils)(in, out); };
  }
  run();  // the first call plans, prepares and (shardmesh) measures its algorithm: not timed
  time_max_over_ranks(state, run);
  communicator const& group = mesh.group(axis_set::of(0));
  // What the mesh measured faster (asked again: remembered, nothing runs), where it measured: the ranks share a node.
  if (impl == "shardmesh" && strided && mesh.state<shardmesh::detail::node_windows>().of(group, axis_set::of(0))) {
    std::size_t const bytes = n * n * n * sizeof(complex);
    auto const chosen = mesh.state<collective_tuning>().strided_all_to_all(
        group, bytes, [](strided_all_to_all_algorithm, communicator const&) {});
    state.counters["chosen"] = static_cast<double>(chosen);
  }
  if (!holds_field(out)) state.SkipWithError("the transposed field differs from the original");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * n * n * sizeof(complex)));
}

void register_all() {
  std::size_t const ranks = world_size();
  for (std::size_t round = 0; round < rounds(); ++round)
    for (std::size_t n : {64, 128}) {
      if (n % ranks != 0) continue;
      std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
      auto const add = [&](bool strided, char const* impl) {
        std::string const name = "pencil/" + std::to_string(ranks) + "/" + std::to_string(n) + "/" +
                                 (strided ? "strided/" : "contiguous/") + impl + suffix;
        benchmark::RegisterBenchmark(
            name, [n, strided, impl = std::string(impl)](benchmark::State& s) { pencil_case(s, n, strided, impl); })
            ->UseManualTime()
            ->Iterations(n >= 128 ? 10 : 50)
            ->Unit(benchmark::kMillisecond);
      };
      add(false, "shardmesh");
      for (char const* impl : {"shardmesh", "shardmesh_datatypes", "shardmesh_node_window",
                               "shardmesh_node_window_streaming", "alltoallw", "hand_packed"})
        add(true, impl);
    }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
