#pragma once
// Reusable communication buffers. Redistributions borrow byte buffers from a
// pool per memory space and return them when their step completes, so that
// repeated redistributions allocate nothing after the first, and steps still
// in flight (asynchronous ones) never share a buffer.

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace shardmesh {

template <class MemorySpace>
class workspace {
 public:
  using buffer_type = Kokkos::View<std::byte*, MemorySpace>;

  // A buffer of at least `bytes`, back in the pool when the lease dies.
  class lease {
   public:
    lease(workspace* owner, buffer_type buffer) : owner_(owner), buffer_(std::move(buffer)) {}
    lease(lease const&) = delete;
    lease& operator=(lease const&) = delete;
    ~lease() { owner_->give_back(std::move(buffer_)); }
    // The buffer as n elements of T. Kokkos allocations are aligned for any T.
    template <class T>
    [[nodiscard]] Kokkos::View<T*, MemorySpace> as(std::size_t n) const {
      return Kokkos::View<T*, MemorySpace>(reinterpret_cast<T*>(buffer_.data()), n);
    }

   private:
    workspace* owner_;
    buffer_type buffer_;
  };

  [[nodiscard]] std::shared_ptr<lease> acquire(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->extent(0) >= bytes) {
        buffer_type found = std::move(*it);
        free_.erase(it);
        return std::make_shared<lease>(this, std::move(found));
      }
    return std::make_shared<lease>(this, buffer_type(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                                                        "shardmesh::workspace"),
                                                     bytes));
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

  // The pool of this memory space; emptied before Kokkos finalizes.
  static workspace& instance() {
    static workspace* pool = [] {
      auto* w = new workspace;
      Kokkos::push_finalize_hook([w] { w->release_all(); });
      return w;
    }();
    return *pool;
  }

 private:
  void give_back(buffer_type buffer) {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(buffer));
  }
  mutable std::mutex mutex_;
  std::vector<buffer_type> free_;
};

}  // namespace shardmesh
