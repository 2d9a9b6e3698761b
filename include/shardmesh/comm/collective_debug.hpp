#pragma once
// Debugging collectives that the ranks do not reach alike. MPI cannot tell
// a collective that only some ranks call from a slow one: it hangs, or, if
// the ranks call different collectives, may return wrong data. With
// SHARDMESH_DEBUG_COLLECTIVES=1 in the environment (read once per process):
//
//  - fingerprints: before each collective, the ranks of its communicator
//    exchange what each is about to run (the collective, its element type,
//    its sequence number on that communicator, and the shardmesh operation
//    that issued it, with its tensor and layouts); if they differ, every
//    rank raises mismatched_collective_error naming what each rank runs.
//  - a watchdog: a thread per process. A rank that waits longer than
//    SHARDMESH_WATCHDOG_SECONDS (default 300) in one collective prints
//    where every rank of the job is (waiting in which collective, since
//    when; or what it last waited in, or that it exited), read from status
//    files each rank keeps in SHARDMESH_WATCHDOG_DIR (default TMPDIR, else
//    /tmp; a folder every node shares shows the whole job), and ends the job.
//
// Off, every collective checks one boolean and does nothing else.

#include "shardmesh/errors.hpp"

#include <mpi.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <source_location>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace shardmesh::detail {

[[nodiscard]] inline bool collectives_debugged() {
  static bool const on = [] {
    char const* v = std::getenv("SHARDMESH_DEBUG_COLLECTIVES");
    return v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0";
  }();
  return on;
}

// The public operation running on this thread, named in fingerprints. Its
// text is made only in debug mode: describe() is not called otherwise.
class operation_scope {
 public:
  template <class Describe>
    requires std::invocable<Describe>
  explicit operation_scope(Describe&& describe) {
    if (!collectives_debugged()) return;
    text_ = describe();
    previous_ = std::exchange(current(), &text_);
    active_ = true;
  }
  // An operation that runs on over several calls (a redistribution's
  // steps), named by text its owner keeps.
  explicit operation_scope(std::string const* kept) {
    if (!collectives_debugged()) return;
    previous_ = std::exchange(current(), kept);
    active_ = true;
  }
  operation_scope(operation_scope const&) = delete;
  operation_scope& operator=(operation_scope const&) = delete;
  ~operation_scope() {
    if (active_) current() = previous_;
  }

  [[nodiscard]] static std::string const*& current() {
    thread_local std::string const* text = nullptr;
    return text;
  }

 private:
  std::string text_;
  std::string const* previous_ = nullptr;
  bool active_ = false;
};

// The line of the caller's code that called the public operation now
// running: the outermost one (matmul's caller, not matmul's call of
// einsum). Public operations take it as a defaulted last parameter. It is
// reported beside the fingerprints and by the watchdog, not compared: ranks
// may reach the same collective from different lines.
class called_from {
 public:
  explicit called_from(std::source_location const& where) {
    if (!collectives_debugged() || current() != nullptr) return;
    current() = &where;
    active_ = true;
  }
  called_from(called_from const&) = delete;
  called_from& operator=(called_from const&) = delete;
  ~called_from() {
    if (active_) current() = nullptr;
  }

  [[nodiscard]] static std::source_location const*& current() {
    thread_local std::source_location const* where = nullptr;
    return where;
  }
  // "file:line", or empty outside a public operation.
  [[nodiscard]] static std::string text() {
    std::source_location const* where = current();
    return where != nullptr ? std::string(where->file_name()) + ":" + std::to_string(where->line()) : std::string();
  }

 private:
  bool active_ = false;
};

// Process-wide debug state: sequence numbers per communicator, this rank's
// status file, the watchdog. Made on first use in debug mode (inside a
// collective, so MPI is initialised) and never destroyed: the watchdog
// thread may read it until the process ends.
class collective_debugger {
 public:
  static collective_debugger& get() {
    static collective_debugger* const d = new collective_debugger;
    return *d;
  }

  // A communicator's count lives on it as an MPI attribute, freed with it
  // and not copied to its duplicates: a handle MPI reuses for a later
  // communicator (which may differ from rank to rank) counts from 1 again.
  std::uint64_t next_sequence(MPI_Comm comm) {
    std::lock_guard lock(mutex_);
    void* value = nullptr;
    int found = 0;
    MPI_Comm_get_attr(comm, sequence_key_, &value, &found);
    auto* count = static_cast<std::uint64_t*>(value);
    if (found == 0) {
      count = new std::uint64_t(0);
      MPI_Comm_set_attr(comm, sequence_key_, count);
    }
    return ++*count;
  }

  // This rank now waits in `what` / no longer waits.
  void enter(std::string_view what) {
    std::lock_guard lock(mutex_);
    waiting_ = std::string(what);
    since_.store(now_ns(), std::memory_order_release);
    write_status("waiting in " + waiting_ + " since " + std::to_string(since_.load()));
  }
  void leave() {
    std::lock_guard lock(mutex_);
    since_.store(0, std::memory_order_release);
    write_status("running; last waited in " + waiting_);
  }

 private:
  static int forget_sequence(MPI_Comm, int, void* count, void*) {
    delete static_cast<std::uint64_t*>(count);
    return MPI_SUCCESS;
  }

  collective_debugger() {
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, forget_sequence, &sequence_key_, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char const* seconds = std::getenv("SHARDMESH_WATCHDOG_SECONDS");
    if (seconds != nullptr) timeout_ = std::strtod(seconds, nullptr);
    char const* folder = std::getenv("SHARDMESH_WATCHDOG_DIR");
    if (folder == nullptr) folder = std::getenv("TMPDIR");
    // One job's ranks share a key: the launcher's job name where it has one,
    // else the launcher daemon every rank on a node descends from.
    char const* job = std::getenv("PMIX_NAMESPACE");
    prefix_ = std::string(folder != nullptr ? folder : "/tmp") + "/shardmesh-watch-" +
              (job != nullptr ? std::string(job) : "ppid" + std::to_string(getppid())) + "-rank-";
    status_ = ::open((prefix_ + std::to_string(rank_)).c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    write_status("running");
    std::atexit([] { get().write_status("exited; last waited in " + get().waiting_); });
    std::thread([this] { watch(); }).detach();
  }

  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // One fixed-size record, rewritten in place.
  void write_status(std::string const& text) {
    if (status_ < 0) return;
    std::string record = text.substr(0, status_size - 1);
    record.resize(status_size - 1, ' ');
    record.push_back('\n');
    (void)::pwrite(status_, record.data(), record.size(), 0);
  }

  [[nodiscard]] std::string status_of(int rank) const {
    int const fd = ::open((prefix_ + std::to_string(rank)).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "no status (it never reached a collective in debug mode)";
    char text[status_size] = {};
    ssize_t const n = ::pread(fd, text, status_size - 1, 0);
    ::close(fd);
    std::string out(text, n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
    return out;
  }

  void watch() {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::int64_t const since = since_.load(std::memory_order_acquire);
      if (since == 0) continue;
      double const waited = static_cast<double>(now_ns() - since) * 1e-9;
      if (waited < timeout_) continue;
      std::string report;
      {
        std::lock_guard lock(mutex_);
        report = "shardmesh watchdog: rank " + std::to_string(rank_) + " has waited " + std::to_string(waited) +
                 " s in " + waiting_ + " (SHARDMESH_WATCHDOG_SECONDS=" + std::to_string(timeout_) +
                 "); the job's ranks:\n";
      }
      for (int r = 0; r < size_; ++r) report += "  rank " + std::to_string(r) + ": " + status_of(r) + "\n";
      report += "shardmesh watchdog: ending the job\n";
      std::fputs(report.c_str(), stderr);
      std::fflush(stderr);
      std::_Exit(EXIT_FAILURE);  // the launcher then ends the other ranks
    }
  }

  static constexpr std::size_t status_size = 512;
  std::mutex mutex_;
  int sequence_key_ = MPI_KEYVAL_INVALID;
  std::string waiting_ = "nothing yet";
  std::atomic<std::int64_t> since_{0};
  int rank_ = 0, size_ = 1;
  double timeout_ = 300;
  std::string prefix_;
  int status_ = -1;
};

// RAII: this rank waits in a collective (debug mode: the watchdog watches).
class blocked_in {
 public:
  explicit blocked_in(std::string_view what) {
    if (!collectives_debugged()) return;
    collective_debugger::get().enter(what);
    active_ = true;
  }
  blocked_in(blocked_in const&) = delete;
  blocked_in& operator=(blocked_in const&) = delete;
  ~blocked_in() {
    if (active_) collective_debugger::get().leave();
  }

 private:
  bool active_ = false;
};

// Collective over comm in debug mode (nothing otherwise): every rank's
// fingerprint of the collective it is about to run; throws
// mismatched_collective_error on every rank if they differ.
inline void check_collective(MPI_Comm comm, std::string_view collective, std::string_view element) {
  if (!collectives_debugged()) return;
  // Each rank's record: the fingerprint compared (size bytes), then its call site.
  constexpr std::size_t size = 256, site_size = 160;
  std::string text = std::string(collective) + " " + std::string(element) + " #" +
                     std::to_string(collective_debugger::get().next_sequence(comm));
  if (std::string const* scope = operation_scope::current(); scope != nullptr) text += " in " + *scope;
  std::string const site = called_from::text();
  std::array<char, size + site_size> mine{};
  std::memcpy(mine.data(), text.data(), std::min(text.size(), size - 1));
  std::memcpy(mine.data() + size, site.data(), std::min(site.size(), site_size - 1));
  int ranks = 1;
  MPI_Comm_size(comm, &ranks);
  std::vector<std::array<char, size + site_size>> all(static_cast<std::size_t>(ranks));
  {
    blocked_in const waiting(site.empty() ? text : text + " (called at " + site + ")");
    MPI_Allgather(mine.data(), size + site_size, MPI_CHAR, all.data(), size + site_size, MPI_CHAR, comm);
  }
  auto const fingerprint = [](auto const& record) { return std::string_view(record.data()); };
  if (std::all_of(all.begin(), all.end(), [&](auto const& r) { return fingerprint(r) == fingerprint(all[0]); })) return;
  std::string m = "collectives differ across the " + std::to_string(ranks) + " ranks of a communicator:";
  for (std::size_t r = 0; r < all.size(); ++r) {
    m += (r == 0 ? " rank " : "; rank ") + std::to_string(r) + " runs " + std::string(fingerprint(all[r]));
    if (std::string_view const at(all[r].data() + size); !at.empty()) m += " (called at " + std::string(at) + ")";
  }
  throw mismatched_collective_error(m);
}

// A collective the library calls on MPI directly, or through parallel HDF5,
// rather than through comm/: in debug mode its fingerprint agreed first and
// the watchdog told while this rank is inside it; otherwise just call().
template <class Call>
decltype(auto) debugged_collective(MPI_Comm comm, std::string_view collective, std::string_view element, Call&& call) {
  check_collective(comm, collective, element);
  blocked_in const waiting(collective);
  return std::forward<Call>(call)();
}

}  // namespace shardmesh::detail
