#pragma once
// Bytes this rank holds, by what they are for, with high-water marks: the
// measure that state sharding and the planner's memory model are checked
// against. Operations record what they allocate and free; the workspace
// records its leases. Safe to share between threads.

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

namespace shardmesh {

enum class memory_category { parameters, gradients, optimizer_state, activations, workspace };
inline constexpr std::size_t memory_category_count = 5;

[[nodiscard]] constexpr std::string_view to_string(memory_category c) {
  switch (c) {
    case memory_category::parameters: return "parameters";
    case memory_category::gradients: return "gradients";
    case memory_category::optimizer_state: return "optimizer state";
    case memory_category::activations: return "activations";
    case memory_category::workspace: return "workspace";
  }
  return "?";
}

class memory_ledger {
 public:
  void allocate(memory_category c, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    auto const i = index(c);
    current_[i] += bytes;
    peak_[i] = std::max(peak_[i], current_[i]);
    total_ += bytes;
    peak_total_ = std::max(peak_total_, total_);
  }

  // Precondition: at least `bytes` of c are held.
  void release(memory_category c, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    current_[index(c)] -= bytes;
    total_ -= bytes;
  }

  [[nodiscard]] std::size_t current(memory_category c) const {
    std::lock_guard lock(mutex_);
    return current_[index(c)];
  }
  // The most held at once since construction or reset_peaks().
  [[nodiscard]] std::size_t peak(memory_category c) const {
    std::lock_guard lock(mutex_);
    return peak_[index(c)];
  }
  [[nodiscard]] std::size_t current_total() const {
    std::lock_guard lock(mutex_);
    return total_;
  }
  // The most held at once over all categories together (not the sum of their peaks).
  [[nodiscard]] std::size_t peak_total() const {
    std::lock_guard lock(mutex_);
    return peak_total_;
  }

  // Starts new high-water marks from what is held now.
  void reset_peaks() {
    std::lock_guard lock(mutex_);
    peak_ = current_;
    peak_total_ = total_;
  }

 private:
  static constexpr std::size_t index(memory_category c) { return static_cast<std::size_t>(c); }
  mutable std::mutex mutex_;
  std::array<std::size_t, memory_category_count> current_{};
  std::array<std::size_t, memory_category_count> peak_{};
  std::size_t total_ = 0;
  std::size_t peak_total_ = 0;
};

// Bytes recorded in a ledger for as long as this object lives (which keeps the ledger alive).
class ledger_entry {
 public:
  ledger_entry() = default;
  ledger_entry(std::shared_ptr<memory_ledger> ledger, memory_category c, std::size_t bytes)
      : ledger_(std::move(ledger)), category_(c), bytes_(bytes) {
    ledger_->allocate(c, bytes);
  }
  ledger_entry(ledger_entry&& other) noexcept
      : ledger_(std::move(other.ledger_)), category_(other.category_), bytes_(other.bytes_) {}
  ledger_entry& operator=(ledger_entry&& other) noexcept {
    if (this != &other) {
      reset();
      ledger_ = std::move(other.ledger_);
      category_ = other.category_;
      bytes_ = other.bytes_;
    }
    return *this;
  }
  ledger_entry(ledger_entry const&) = delete;
  ledger_entry& operator=(ledger_entry const&) = delete;
  ~ledger_entry() { reset(); }

  [[nodiscard]] std::size_t bytes() const { return ledger_ != nullptr ? bytes_ : 0; }
  [[nodiscard]] memory_category category() const { return category_; }

 private:
  void reset() {
    if (ledger_ != nullptr) std::exchange(ledger_, nullptr)->release(category_, bytes_);
  }
  std::shared_ptr<memory_ledger> ledger_;
  memory_category category_ = memory_category::workspace;
  std::size_t bytes_ = 0;
};

}  // namespace shardmesh
