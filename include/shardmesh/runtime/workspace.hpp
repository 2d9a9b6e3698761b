#pragma once
// Reusable communication buffers of one mesh. Redistributions borrow byte
// buffers from the pool of their memory space and return them when their
// step completes, so that repeated redistributions allocate nothing after
// the first, and steps still in flight (asynchronous ones) never share a
// buffer. Bytes on lease are recorded in the mesh's memory ledger under
// "workspace": the extra memory redistributions need beyond their input and
// output. Safe to share between threads.

#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"
#include "shardmesh/runtime/mesh_context.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace shardmesh {

template <class MemorySpace>
class workspace : public std::enable_shared_from_this<workspace<MemorySpace>> {
 public:
  using buffer_type = Kokkos::View<std::byte*, MemorySpace>;

  // A buffer of at least `bytes`, back in the pool when the lease dies
  // (the lease keeps the pool alive).
  class lease {
   public:
    lease(std::shared_ptr<workspace> owner, buffer_type buffer, std::size_t bytes)
        : owner_(std::move(owner)), buffer_(std::move(buffer)), bytes_(bytes) {}
    lease(lease const&) = delete;
    lease& operator=(lease const&) = delete;
    ~lease() { owner_->give_back(std::move(buffer_), bytes_); }
    // The buffer as n elements of T. Kokkos allocations are aligned for any T.
    template <class T>
    [[nodiscard]] Kokkos::View<T*, MemorySpace> as(std::size_t n) const {
      return Kokkos::View<T*, MemorySpace>(reinterpret_cast<T*>(buffer_.data()), n);
    }

   private:
    std::shared_ptr<workspace> owner_;
    buffer_type buffer_;
    std::size_t bytes_;  // asked for; the buffer may be larger
  };

  explicit workspace(std::shared_ptr<memory_ledger> ledger) : ledger_(std::move(ledger)) {}

  [[nodiscard]] std::shared_ptr<lease> acquire(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    // The smallest free buffer that fits, else a new one.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->extent(0) >= bytes && (best == free_.end() || it->extent(0) < best->extent(0))) best = it;
    buffer_type found;
    if (best != free_.end()) {
      found = std::move(*best);
      free_.erase(best);
    } else {
      found = buffer_type(Kokkos::view_alloc(Kokkos::WithoutInitializing, "shardmesh::workspace"), bytes);
    }
    leased_ += bytes;
    peak_leased_ = std::max(peak_leased_, leased_);
    ledger_->allocate(memory_category::workspace, bytes);
    return std::make_shared<lease>(this->shared_from_this(), std::move(found), bytes);
  }

  // Bytes asked for by the leases alive now, and the most at once since reset_peak().
  [[nodiscard]] std::size_t leased_bytes() const {
    std::lock_guard lock(mutex_);
    return leased_;
  }
  [[nodiscard]] std::size_t peak_leased_bytes() const {
    std::lock_guard lock(mutex_);
    return peak_leased_;
  }
  void reset_peak() {
    std::lock_guard lock(mutex_);
    peak_leased_ = leased_;
  }

  // Bytes the pool holds while no buffer is leased.
  [[nodiscard]] std::size_t pooled_bytes() const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (auto const& b : free_) n += b.extent(0);
    return n;
  }

  void release_all() {
    std::lock_guard lock(mutex_);
    free_.clear();
  }

 private:
  void give_back(buffer_type buffer, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    leased_ -= bytes;
    ledger_->release(memory_category::workspace, bytes);
    free_.push_back(std::move(buffer));
  }
  std::shared_ptr<memory_ledger> ledger_;
  mutable std::mutex mutex_;
  std::vector<buffer_type> free_;
  std::size_t leased_ = 0;
  std::size_t peak_leased_ = 0;
};

namespace detail {

// The pool of one memory space, as a state of a mesh.
template <class MemorySpace>
struct workspace_state {
  explicit workspace_state(mesh_context const& context)
      : pool(std::make_shared<workspace<MemorySpace>>(context.ledger())) {}
  std::shared_ptr<workspace<MemorySpace>> pool;
};

}  // namespace detail

// The mesh's pool of buffers in MemorySpace.
template <class MemorySpace>
[[nodiscard]] workspace<MemorySpace>& workspace_of(device_mesh const& mesh) {
  return *mesh.state<detail::workspace_state<MemorySpace>>().pool;
}

}  // namespace shardmesh
