#pragma once
// Calls and bytes of every collective issued on a communicator and the
// communicators split from it (a mesh and its axis groups), so that tests
// can assert "one all-to-all, 3/4 of the local tensor" and benchmarks can
// report bytes against the lower bound. Bytes are what this rank sent to and
// received from other ranks; data a rank keeps is not counted. Safe to
// share between threads.

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

class comm_counters {
 public:
  using table = std::map<std::string, collective_count, std::less<>>;

  void record(std::string_view collective, std::uint64_t sent, std::uint64_t received) {
    std::lock_guard lock(mutex_);
    auto& c = counts_[std::string(collective)];
    ++c.calls;
    c.bytes_sent += sent;
    c.bytes_received += received;
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
  // A copy: the table may change while the caller reads it.
  [[nodiscard]] table all() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }
  void reset() {
    std::lock_guard lock(mutex_);
    counts_.clear();
  }

 private:
  mutable std::mutex mutex_;
  table counts_;
};

}  // namespace shardmesh
