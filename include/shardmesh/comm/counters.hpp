#pragma once
// Calls and bytes of every collective this process issued, so that tests can
// assert "one all-to-all, 3/4 of the local tensor" and benchmarks can report
// bytes against the lower bound. Bytes are what this rank sent to and
// received from other ranks; data a rank keeps is not counted.

#include <cstddef>
#include <cstdint>
#include <map>
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
  void record(std::string_view collective, std::uint64_t sent, std::uint64_t received) {
    auto& c = counts_[std::string(collective)];
    ++c.calls;
    c.bytes_sent += sent;
    c.bytes_received += received;
  }
  [[nodiscard]] collective_count operator[](std::string_view collective) const {
    auto const it = counts_.find(std::string(collective));
    return it == counts_.end() ? collective_count{} : it->second;
  }
  [[nodiscard]] collective_count total() const {
    collective_count sum;
    for (auto const& [name, c] : counts_) {
      sum.calls += c.calls;
      sum.bytes_sent += c.bytes_sent;
      sum.bytes_received += c.bytes_received;
    }
    return sum;
  }
  [[nodiscard]] std::map<std::string, collective_count, std::less<>> const& all() const { return counts_; }
  void reset() { counts_.clear(); }

 private:
  std::map<std::string, collective_count, std::less<>> counts_;
};

// This process's counters.
inline comm_counters& counters() {
  static comm_counters instance;
  return instance;
}

}  // namespace shardmesh
