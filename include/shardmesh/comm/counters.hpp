#pragma once
// Calls and bytes of every collective issued on a communicator and the
// communicators split from it (a mesh and its axis groups), so that tests
// can assert "one all-to-all, 3/4 of the local tensor" and benchmarks can
// report bytes against the lower bound. Bytes are what this rank sent to and
// received from other ranks; data a rank keeps is not counted. Copies
// between a buffer and its host mirror for MPI (staging.hpp) are counted
// apart, in staged(), so that they never add to the traffic. Safe to share
// between threads.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace shardmesh {

struct collective_count {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  bool operator==(collective_count const&) const = default;
};

// Buffers handed to MPI through a host mirror (staging.hpp), and the bytes
// copied into mirrors before MPI read them and back out after MPI wrote them.
struct staging_count {
  std::uint64_t buffers = 0;
  std::uint64_t bytes_to_host = 0;
  std::uint64_t bytes_from_host = 0;
  bool operator==(staging_count const&) const = default;
};

class comm_counters {
 public:
  using table = std::map<std::string, collective_count, std::less<>>;

  void record(std::string_view collective, std::uint64_t sent, std::uint64_t received) {
    std::lock_guard lock(mutex_);
    auto it = counts_.find(collective);  // no string made for a name already counted
    if (it == counts_.end()) it = counts_.emplace(std::string(collective), collective_count{}).first;
    collective_count& c = it->second;
    ++c.calls;
    c.bytes_sent += sent;
    c.bytes_received += received;
  }
  // One staged buffer, whose copies move `to_host` and `from_host` bytes.
  void record_staging(std::uint64_t to_host, std::uint64_t from_host) {
    std::lock_guard lock(mutex_);
    ++staged_.buffers;
    staged_.bytes_to_host += to_host;
    staged_.bytes_from_host += from_host;
  }
  [[nodiscard]] collective_count operator[](std::string_view collective) const {
    std::lock_guard lock(mutex_);
    auto const it = counts_.find(collective);
    return it == counts_.end() ? collective_count{} : it->second;
  }
  [[nodiscard]] collective_count total() const {
    std::lock_guard lock(mutex_);
    collective_count sum;
    for (auto const& [name, c] : counts_) {
      sum.calls += c.calls;
      sum.bytes_sent += c.bytes_sent;
      sum.bytes_received += c.bytes_received;
    }
    return sum;
  }
  [[nodiscard]] staging_count staged() const {
    std::lock_guard lock(mutex_);
    return staged_;
  }
  // A copy: the table may change while the caller reads it.
  [[nodiscard]] table all() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }
  void reset() {
    std::lock_guard lock(mutex_);
    counts_.clear();
    staged_ = {};
  }

 private:
  mutable std::mutex mutex_;
  table counts_;
  staging_count staged_;
};

}  // namespace shardmesh
