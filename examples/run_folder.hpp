#pragma once
// The folder a training run saves its checkpoints to, or resumes from:
// checked before the first step, held by one live job at a time, and never
// written to once the job is being torn down.
//
// A job holds a folder through DIR/lock, which names the host and process
// of its rank 0: created before the first step, removed when the job ends.
// Another job finds the lock and refuses the folder while that process
// lives; a lock left by a job that died is taken over. A job whose
// launcher is gone (its ranks outlive a killed mpiexec for about a second)
// abandons any save it is in and starts none.

#include <shardmesh/errors.hpp>

#include <mpi.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace train_gpt {

// The text rank 0 passes, on every rank.
inline std::string from_rank_zero(std::string text) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto length = static_cast<std::uint64_t>(text.size());
  MPI_Bcast(&length, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  text.resize(length);
  MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD);
  return text;
}

// Why `folder` cannot take checkpoints (made if missing): not a folder,
// not writable, or its state.h5 not a file. Empty when it can.
inline std::string save_folder_error(std::filesystem::path const& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (!std::filesystem::is_directory(folder))
    return "--save " + folder.string() + " is not a folder" + (error ? " (" + error.message() + ")" : "");
  for (char const* name : {"state.h5", "state.h5.partial"}) {
    std::filesystem::path const file = folder / name;
    if (std::filesystem::exists(std::filesystem::symlink_status(file)) && !std::filesystem::is_regular_file(file))
      return "--save " + folder.string() + ": " + file.string() + " exists and is not a file";
  }
  // Writable: a file made and removed, as the save will (permissions alone miss read-only mounts).
  std::filesystem::path const probe = folder / ".write-probe";
  int const fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "--save " + folder.string() + " is not writable (" + std::generic_category().message(errno) + ")";
  ::close(fd);
  std::filesystem::remove(probe, error);
  return {};
}

// The lock of a folder, held by this job while it lives (rank 0 makes it).
class folder_lock {
 public:
  folder_lock() = default;
  // Collective: takes `folder`'s lock for this job, or throws (every rank)
  // while another live job holds it.
  explicit folder_lock(std::filesystem::path const& folder) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::string why;
    if (rank == 0) why = take(folder / "lock");
    why = from_rank_zero(why);
    if (!why.empty()) throw shardmesh::checkpoint_error(why);
    if (rank == 0) path_ = folder / "lock";
  }
  folder_lock(folder_lock const&) = delete;
  folder_lock& operator=(folder_lock const&) = delete;
  folder_lock(folder_lock&&) = default;
  folder_lock& operator=(folder_lock&&) = default;
  ~folder_lock() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove(path_, ignored);
  }

 private:
  static std::string host() {
    std::string name(256, '\0');
    ::gethostname(name.data(), name.size());
    return name.c_str();
  }
  // Empty when taken.
  static std::string take(std::filesystem::path const& lock) {
    std::string const mine = host() + " " + std::to_string(::getpid());
    for (int attempt = 0; attempt < 2; ++attempt) {
      int const fd = ::open(lock.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) {
        bool const written = ::write(fd, mine.data(), mine.size()) == static_cast<ssize_t>(mine.size());
        ::close(fd);
        if (written) return {};
        return "cannot write the lock " + lock.string();
      }
      std::string holder_host;
      long holder = 0;
      std::ifstream(lock) >> holder_host >> holder;
      // The holder lives: on this host its process exists; on another we cannot tell, so it is held.
      bool const alive =
          holder_host != host() || (holder > 0 && (::kill(static_cast<pid_t>(holder), 0) == 0 || errno == EPERM));
      if (alive)
        return "the folder " + lock.parent_path().string() + " is held by the live job of process " +
               std::to_string(holder) + " on " + holder_host + " (" + lock.string() + ")";
      std::error_code ignored;
      std::filesystem::remove(lock, ignored);  // left by a job that died: taken over
    }
    return "cannot take the lock " + lock.string();
  }

  std::filesystem::path path_;
};

// Whether this rank's launcher is gone: its parent process changed since
// `launcher` (the parent when the run started) died and the rank was
// handed to another.
inline bool launcher_gone(pid_t launcher) { return ::getppid() != launcher; }

}  // namespace train_gpt
