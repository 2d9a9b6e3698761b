// A rank killed in the middle of a save. Run only by io.interrupted_save.*:
//
//   mpiexec -n 3 interrupted_save kill DIR    must fail: the launcher reports the killed rank
//   mpiexec -n 2 interrupted_save check DIR   on any rank count, afterwards
//
// kill: saves checkpoint A to DIR/state.h5 and commits it; then starts a
// save of other values to DIR/state.h5 and one to DIR/fresh.h5, writes a
// dataset into each, and rank 1 (rank 0 on one rank) kills itself with
// SIGKILL before either commits, while the other ranks go on writing and
// committing (they wait in a collective until the launcher ends the job).
// check: DIR/state.h5 holds exactly checkpoint A (every dataset and value,
// read under other layouts and gathered), nothing of the interrupted save;
// DIR/fresh.h5 does not exist; the interrupted saves' temporary files are
// there (the kill came after they began) and a new save over them commits.
#include <shardmesh/io/checkpoint.hpp>
#include <shardmesh/tensor/distribute.hpp>
#include <shardmesh/tensor/gather.hpp>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

using namespace shardmesh;

namespace {

using matrix = Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>;
using counts = Kokkos::View<std::int64_t*, Kokkos::LayoutRight, Kokkos::HostSpace>;

// The tensors of a checkpoint; `shift` tells checkpoint A (0) from the interrupted save.
matrix weights(std::int64_t shift) {
  matrix m("weights", 7, 5);
  for (std::size_t i = 0; i < m.size(); ++i) m.data()[i] = 0.5 * static_cast<double>(i) - 4.0 + 1000.0 * shift;
  return m;
}

counts steps(std::int64_t shift) {
  counts c("steps", 11);
  for (std::size_t i = 0; i < c.size(); ++i) c.data()[i] = static_cast<std::int64_t>(i * i) - 20 + shift;
  return c;
}

template <class View>
bool same(View const& a, View const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0;
}

int failures = 0;

void expect(bool ok, char const* what) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!ok) {
    std::fprintf(stderr, "interrupted_save: rank %d: FAILED: %s\n", rank, what);
    ++failures;
  }
}

void kill_run(device_mesh const& mesh, std::filesystem::path const& dir) {
  std::filesystem::path const state = dir / "state.h5";
  std::filesystem::path const fresh = dir / "fresh.h5";
  if (mesh.rank() == 0) {  // no file of an earlier run
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    io::checkpoint_writer a(mesh, state);
    a.write("weights", distribute(mesh, layout{shard("a"), replicated}, weights(0)));
    a.write("steps", distribute(mesh, layout{cyclic(2, "a")}, steps(0)));
    a.write_value("step", 100);
    a.commit();
  }
  std::size_t const victim = mesh.size() > 1 ? 1 : 0;
  io::checkpoint_writer again(mesh, state);
  io::checkpoint_writer other(mesh, fresh);
  again.write("weights", distribute(mesh, layout{replicated, shard("a")}, weights(1)));
  other.write("weights", distribute(mesh, layout{shard("a"), replicated}, weights(2)));
  if (mesh.rank() == victim) {
    std::fprintf(stderr, "interrupted_save: rank %zu of %zu kills itself before the commits\n", victim, mesh.size());
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  again.write("steps", distribute(mesh, layout{shard("a")}, steps(1)));
  again.write("interrupted", distribute(mesh, layout{shard("a")}, steps(1)));
  again.write_value("step", 200);
  other.commit();
  again.commit();
  std::fprintf(stderr, "interrupted_save: rank %zu got past the commits of a save that lost rank %zu\n", mesh.rank(),
               victim);
}

void check_run(device_mesh const& mesh, std::filesystem::path const& dir) {
  std::filesystem::path const state = dir / "state.h5";
  std::filesystem::path const fresh = dir / "fresh.h5";
  expect(!std::filesystem::exists(fresh), "fresh.h5, never committed, does not exist");
  expect(std::filesystem::exists(io::temporary_path(state)) && std::filesystem::exists(io::temporary_path(fresh)),
         "the interrupted saves' temporary files are there: the kill came after they began");
  {
    io::checkpoint_reader const in(mesh, state);
    expect(same(gather(in.read<double, 2>("weights", layout{replicated, shard("a")})), weights(0)),
           "weights as checkpoint A saved them");
    expect(same(gather(in.read<double, 2>("weights", layout{shard("a"), replicated})), weights(0)),
           "weights as checkpoint A saved them, rows");
    expect(same(gather(in.read<std::int64_t, 1>("steps", layout{shard("a")})), steps(0)),
           "steps as checkpoint A saved them");
    expect(in.value("step") == 100, "the value step of checkpoint A");
    expect(!in.contains("interrupted"), "no dataset of the interrupted save");
  }
  // A save after the crash replaces the leftover temporary file and commits.
  {
    io::checkpoint_writer b(mesh, state);
    b.write("weights", distribute(mesh, layout{shard("a"), replicated}, weights(3)));
    b.write_value("step", 300);
    b.commit();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect(!std::filesystem::exists(io::temporary_path(state)), "no temporary file after the new save's commit");
  io::checkpoint_reader const in(mesh, state);
  expect(same(gather(in.read<double, 2>("weights", layout{replicated, shard("a")})), weights(3)),
         "the new save's weights");
  expect(in.value("step") == 300 && !in.contains("steps"), "the new save's values only");
}

}  // namespace

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    int rank = 0;
    int ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    std::string const mode = argc == 3 ? argv[1] : "";
    if (mode != "kill" && mode != "check") {
      if (rank == 0) std::fprintf(stderr, "usage: interrupted_save kill|check DIR\n");
      status = 2;
    } else {
      try {
        device_mesh const mesh(MPI_COMM_WORLD, mesh_shape{{"a", static_cast<std::size_t>(ranks)}});
        if (mode == "kill") {
          kill_run(mesh, argv[2]);
          status = 1;  // never here: the job ends with the killed rank
        } else {
          check_run(mesh, argv[2]);
          MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
          status = failures == 0 ? 0 : 1;
          if (rank == 0)
            std::printf("interrupted_save: %s on %d ranks: checkpoint A intact, no fresh.h5: %s\n", argv[2], ranks,
                        status == 0 ? "passed" : "FAILED");
        }
      } catch (std::exception const& e) {
        std::fprintf(stderr, "interrupted_save: rank %d: %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  }
  MPI_Finalize();
  return status;
}
