#pragma once
// A folder for one test run's files, the same on every rank (rank 0 names
// it, after its process id, so that runs at several rank counts side by
// side do not meet), removed when the test ends.

#include <mpi.h>

#include <unistd.h>
#include <filesystem>
#include <string>

namespace shardmesh::test {

class scratch_dir {
 public:
  explicit scratch_dir(std::string const& stem) {
    long id = static_cast<long>(getpid());
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    path_ = std::filesystem::temp_directory_path() / (stem + "-" + std::to_string(id));
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::filesystem::create_directories(path_);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  scratch_dir(scratch_dir const&) = delete;
  scratch_dir& operator=(scratch_dir const&) = delete;
  ~scratch_dir() {
    MPI_Barrier(MPI_COMM_WORLD);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::error_code ignored;
    if (rank == 0) std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] std::filesystem::path operator/(std::string const& name) const { return path_ / name; }
  [[nodiscard]] std::filesystem::path const& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace shardmesh::test
