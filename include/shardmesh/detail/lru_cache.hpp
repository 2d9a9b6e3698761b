#pragma once
// A bounded cache of values made on first use, shared by every thread of a
// process: lookups are hashed and guarded by one lock, and once `capacity`
// entries are held the least recently used one is dropped. Values are
// handed out as shared pointers, so one still in use outlives its eviction.
// Standard C++ only.

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace shardmesh::detail {

template <class Key, class Value, class Hash = std::hash<Key>>
class lru_cache {
 public:
  using value_pointer = std::shared_ptr<Value const>;

  explicit lru_cache(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // The value for key, made by make() (under the lock) if absent.
  template <class Make>
  [[nodiscard]] value_pointer get(Key const& key, Make&& make) {
    std::lock_guard lock(mutex_);
    if (auto const it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);  // now the most recent
      return it->second->second;
    }
    auto value = std::make_shared<Value const>(std::forward<Make>(make)());
    order_.emplace_front(key, value);
    index_.emplace(key, order_.begin());
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return value;
  }

  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mutex_);
    return order_.size();
  }
  [[nodiscard]] std::size_t capacity() const { return capacity_; }
  void clear() {
    std::lock_guard lock(mutex_);
    index_.clear();
    order_.clear();
  }

 private:
  using entry_list = std::list<std::pair<Key, value_pointer>>;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  entry_list order_;  // most recently used first
  std::unordered_map<Key, typename entry_list::iterator, Hash> index_;
};

}  // namespace shardmesh::detail
