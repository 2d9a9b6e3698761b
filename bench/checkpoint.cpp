// Checkpoint bandwidth, measured side by side in one run:
//
//   save/<size>/<impl>  <size> of float32 state, a matrix of 1024 columns
//       sharded on its rows over every rank (or, for 75x5KiB, 75 matrices
//       of 40 x 32 floats, as a small model's parameters and optimizer
//       state are), written to a new file (the last one deleted first, in
//       the timed part):
//         shardmesh  io::checkpoint_writer: create, write the dataset (box
//                    checksums included), commit (close, rename)
//         mpi_io     the same bytes by hand: MPI_File_open, each rank's
//                    block of each matrix by MPI_File_write_at_all (one
//                    after the other in the file), MPI_File_close
//   load/<size>/<impl>  the same file read back into the same layout:
//         shardmesh  io::checkpoint_reader: open, read the dataset into an
//                    existing tensor (checksums checked)
//         shardmesh_unverified  the same without checking the checksums
//         mpi_io     MPI_File_open, MPI_File_read_at_all, MPI_File_close
//
// Files go to SHARDMESH_BENCH_DIR (default: the system's temporary folder)
// and are removed after each case. Time: the slowest rank's per iteration;
// bytes_per_second counts the whole state once.
#include "deferred_registration.hpp"
#include "max_over_ranks.hpp"
#include "rounds.hpp"

#include <shardmesh/io/checkpoint.hpp>
#include <shardmesh/shardmesh.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using tensor = dynamic_dtensor<float, 2, host>;

using state = std::vector<tensor>;

// The cases' states by name: one large matrix, or many small ones.
constexpr std::size_t small_count = 75, small_rows = 40, small_columns = 32;

std::unique_ptr<device_mesh>& mesh_slot() {
  static std::unique_ptr<device_mesh> mesh;
  return mesh;
}
device_mesh const& world_mesh() {
  auto& mesh = mesh_slot();
  if (!mesh) mesh = std::make_unique<device_mesh>(MPI_COMM_WORLD, mesh_shape{{"dp", dynamic_extent}});
  return *mesh;
}

std::filesystem::path scratch_file(std::string const& name) {
  char const* dir = std::getenv("SHARDMESH_BENCH_DIR");
  return (dir != nullptr ? std::filesystem::path(dir) : std::filesystem::temp_directory_path()) /
         ("shardmesh-bench-" + name);
}

// A rows x columns matrix of floats sharded on rows (each rank's block contiguous in the file too).
tensor matrix_of(std::size_t rows, std::size_t columns, std::size_t seed) {
  device_mesh const& mesh = world_mesh();
  layout const l{shard("dp"), replicated};
  tensor_index const global{rows, columns};
  auto local = shardmesh::detail::allocate<tensor::view_type>(
      "state", local_extents(mesh.shape(), bind(mesh.shape(), l), global, mesh.rank()));
  Kokkos::parallel_for(Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, local.size()),
                       [=](std::size_t i) { local.data()[i] = static_cast<float>((i + seed) % 1000) * 0.25f; });
  return tensor(mesh, l, {rows, columns}, local);
}

// `bytes` in one matrix of 1024 columns, or (bytes 0) the many small matrices.
state state_of(std::size_t bytes) {
  if (bytes > 0) return {matrix_of(bytes / sizeof(float) / 1024, 1024, 0)};
  state out;
  for (std::size_t i = 0; i < small_count; ++i) out.push_back(matrix_of(small_rows, small_columns, i));
  return out;
}

std::size_t bytes_of(state const& s) {
  std::size_t n = 0;
  for (tensor const& x : s) n += x.global_extents()[0] * x.global_extents()[1] * sizeof(float);
  return n;
}

// This rank's block of x: its byte offset in a file of the whole matrix.
MPI_Offset offset_of(tensor const& x) {
  tensor_index const first = local_to_global(x.mesh().shape(), x.bound(), x.global_extents(), x.mesh().rank(), {});
  return static_cast<MPI_Offset>(first[0] * x.global_extents()[1] * sizeof(float));
}

// The baseline: each rank's block of each matrix at its offset, collectively, the matrices one after the other.
void by_hand(state const& s, std::filesystem::path const& file, bool write) {
  MPI_File fh = MPI_FILE_NULL;
  MPI_File_open(MPI_COMM_WORLD, file.c_str(), write ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                MPI_INFO_NULL, &fh);
  MPI_Offset base = 0;
  for (tensor const& x : s) {
    int const count = static_cast<int>(x.local().size());
    if (write)
      MPI_File_write_at_all(fh, base + offset_of(x), x.local().data(), count, MPI_FLOAT, MPI_STATUS_IGNORE);
    else
      MPI_File_read_at_all(fh, base + offset_of(x), x.local().data(), count, MPI_FLOAT, MPI_STATUS_IGNORE);
    base += static_cast<MPI_Offset>(x.global_extents()[0] * x.global_extents()[1] * sizeof(float));
  }
  MPI_File_close(&fh);
}

void save_with_shardmesh(state const& s, std::filesystem::path const& file) {
  io::checkpoint_writer out(world_mesh(), file);
  for (std::size_t i = 0; i < s.size(); ++i) out.add("state/" + std::to_string(i), s[i]);
  out.commit();
}

void save_case(benchmark::State& bench, std::size_t bytes, std::string const& impl) {
  state const s = state_of(bytes);
  std::filesystem::path const file = scratch_file("save-" + impl + ".h5");
  time_max_over_ranks(bench, [&] {
    // Both write a new file where the last one was: deleted first (a
    // checkpoint renamed over an existing file makes ext4 start writing the
    // new one to disk at once, a cost docs/08-checkpoints.md measures apart).
    if (world_rank() == 0) std::filesystem::remove(file);
    MPI_Barrier(MPI_COMM_WORLD);
    if (impl == "shardmesh")
      save_with_shardmesh(s, file);
    else
      by_hand(s, file, true);
  });
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove(file);
  bench.SetBytesProcessed(static_cast<std::int64_t>(bench.iterations() * bytes_of(s)));
}

void load_case(benchmark::State& bench, std::size_t bytes, std::string const& impl) {
  state const s = state_of(bytes);
  std::filesystem::path const file = scratch_file("load-" + impl + ".h5");
  if (impl != "mpi_io")
    save_with_shardmesh(s, file);
  else
    by_hand(s, file, true);
  time_max_over_ranks(bench, [&] {
    if (impl != "mpi_io") {
      io::checkpoint_reader const in(world_mesh(), file, {.verify = impl == "shardmesh"});
      for (std::size_t i = 0; i < s.size(); ++i) in.read("state/" + std::to_string(i), s[i]);
    } else {
      by_hand(s, file, false);
    }
  });
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove(file);
  bench.SetBytesProcessed(static_cast<std::int64_t>(bench.iterations() * bytes_of(s)));
}

void register_all() {
  Kokkos::push_finalize_hook([] { mesh_slot().reset(); });
  for (std::size_t round = 0; round < rounds(); ++round) {
    std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
    for (std::size_t mib : {0, 64, 256, 1024})  // 0: the many small matrices
      for (char const* kind : {"save", "load"})
        for (char const* impl : {"shardmesh", "shardmesh_unverified", "mpi_io"}) {
          if (std::string(kind) == "save" && std::string(impl) == "shardmesh_unverified") continue;
          std::string const size = mib == 0 ? std::to_string(small_count) + "x5KiB" : std::to_string(mib) + "MiB";
          std::string const name = std::string(kind) + "/" + size + "/" + impl + suffix;
          benchmark::RegisterBenchmark(
              name, [mib, save = std::string(kind) == "save", impl = std::string(impl)](
                        benchmark::State& bench) { (save ? save_case : load_case)(bench, mib << 20, impl); })
              ->UseManualTime()
              ->Iterations(mib >= 1024 ? 2
                           : mib == 0  ? 10
                                       : 3)
              ->Unit(benchmark::kMillisecond);
        }
  }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
