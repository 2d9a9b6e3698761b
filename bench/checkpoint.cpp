// Checkpoint bandwidth, measured side by side in one run:
//
//   save/<size>/<impl>  <size> of float32 state, a matrix of 1024 columns
//       sharded on its rows over every rank, written to a new file (the
//       last one deleted first, in the timed part):
//         shardmesh  io::checkpoint_writer: create, write the dataset (box
//                    checksums included), commit (close, rename)
//         mpi_io     the same bytes by hand: MPI_File_open, each rank's
//                    block by MPI_File_write_at_all, MPI_File_close
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

namespace {

using namespace shardmesh;
using namespace shardmesh::bench;
using host = Kokkos::HostSpace;
using tensor = dynamic_dtensor<float, 2, host>;

constexpr std::size_t columns = 1024;

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

// The state: rows x columns floats sharded on rows (each rank's block contiguous in the file too).
tensor state_of(std::size_t bytes) {
  device_mesh const& mesh = world_mesh();
  std::size_t const rows = bytes / sizeof(float) / columns;
  layout const l{shard("dp"), replicated};
  tensor_index const global{rows, columns};
  auto local = shardmesh::detail::allocate<tensor::view_type>(
      "state", local_extents(mesh.shape(), bind(mesh.shape(), l), global, mesh.rank()));
  Kokkos::parallel_for(Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, local.size()),
                       [=](std::size_t i) { local.data()[i] = static_cast<float>(i % 1000) * 0.25f; });
  return tensor(mesh, l, {rows, columns}, local);
}

// This rank's block: its byte offset in a file of the whole matrix, and its count.
MPI_Offset offset_of(tensor const& x) {
  tensor_index const first = local_to_global(x.mesh().shape(), x.bound(), x.global_extents(), x.mesh().rank(), {});
  return static_cast<MPI_Offset>(first[0] * columns * sizeof(float));
}

// The baseline's write: each rank's block at its offset, collectively.
void write_by_hand(tensor const& x, std::filesystem::path const& file) {
  MPI_File fh = MPI_FILE_NULL;
  MPI_File_open(MPI_COMM_WORLD, file.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
  MPI_File_write_at_all(fh, offset_of(x), x.local().data(), static_cast<int>(x.local().size()), MPI_FLOAT,
                        MPI_STATUS_IGNORE);
  MPI_File_close(&fh);
}

void save_case(benchmark::State& state, std::size_t bytes, std::string const& impl) {
  tensor const x = state_of(bytes);
  std::filesystem::path const file = scratch_file("save-" + impl + ".h5");
  time_max_over_ranks(state, [&] {
    // Both write a new file where the last one was: deleted first (a
    // checkpoint renamed over an existing file makes ext4 start writing the
    // new one to disk at once, a cost docs/08-checkpoints.md measures apart).
    if (world_rank() == 0) std::filesystem::remove(file);
    MPI_Barrier(MPI_COMM_WORLD);
    if (impl == "shardmesh") {
      io::checkpoint_writer out(x.mesh(), file);
      out.write("state", x);
      out.commit();
    } else {
      write_by_hand(x, file);
    }
  });
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove(file);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void load_case(benchmark::State& state, std::size_t bytes, std::string const& impl) {
  tensor const x = state_of(bytes);
  std::filesystem::path const file = scratch_file("load-" + impl + ".h5");
  int const count = static_cast<int>(x.local().size());
  if (impl != "mpi_io") {
    io::checkpoint_writer out(x.mesh(), file);
    out.write("state", x);
    out.commit();
  } else {
    write_by_hand(x, file);
  }
  time_max_over_ranks(state, [&] {
    if (impl != "mpi_io") {
      io::checkpoint_reader const in(x.mesh(), file, {.verify = impl == "shardmesh"});
      in.read("state", x);
    } else {
      MPI_File fh = MPI_FILE_NULL;
      MPI_File_open(MPI_COMM_WORLD, file.c_str(), MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
      MPI_File_read_at_all(fh, offset_of(x), x.local().data(), count, MPI_FLOAT, MPI_STATUS_IGNORE);
      MPI_File_close(&fh);
    }
  });
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::filesystem::remove(file);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void register_all() {
  Kokkos::push_finalize_hook([] { mesh_slot().reset(); });
  for (std::size_t round = 0; round < rounds(); ++round) {
    std::string const suffix = rounds() > 1 ? "/round:" + std::to_string(round) : "";
    for (std::size_t mib : {64, 256, 1024})
      for (char const* kind : {"save", "load"})
        for (char const* impl : {"shardmesh", "shardmesh_unverified", "mpi_io"}) {
          if (std::string(kind) == "save" && std::string(impl) == "shardmesh_unverified") continue;
          std::string const name = std::string(kind) + "/" + std::to_string(mib) + "MiB/" + impl + suffix;
          benchmark::RegisterBenchmark(
              name, [mib, save = std::string(kind) == "save", impl = std::string(impl)](
                        benchmark::State& state) { (save ? save_case : load_case)(state, mib << 20, impl); })
              ->UseManualTime()
              ->Iterations(mib >= 1024 ? 2 : 3)
              ->Unit(benchmark::kMillisecond);
        }
  }
}

int const registered = (deferred_registrations().push_back(register_all), 0);

}  // namespace
