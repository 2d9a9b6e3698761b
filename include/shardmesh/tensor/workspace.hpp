#pragma once
// Reusable communication buffers. Redistributions borrow byte buffers from a
// pool per memory space and return them when their step completes, so that
// repeated redistributions allocate nothing after the first, and steps still
// in flight (asynchronous ones) never share a buffer. The pool counts the
// bytes on lease and their high-water mark: the extra memory redistributions
// need beyond their input and output.

#include <Kokkos_Core.hpp>

#include <algorithm>
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
    lease(workspace* owner, buffer_type buffer, std::size_t bytes)
        : owner_(owner), buffer_(std::move(buffer)), bytes_(bytes) {}
    lease(lease const&) = delete;
    lease& operator=(lease const&) = delete;
    ~lease() { owner_->give_back(std::move(buffer_), bytes_); }
    // The buffer as n elements of T. Kokkos allocations are aligned for any T.
    template <class T>
    [[nodiscard]] Kokkos::View<T*, MemorySpace> as(std::size_t n) const {
      return Kokkos::View<T*, MemorySpace>(reinterpret_cast<T*>(buffer_.data()), n);
    }

   private:
    workspace* owner_;
    buffer_type buffer_;
    std::size_t bytes_;  // asked for; the buffer may be larger
  };

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
    return std::make_shared<lease>(this, std::move(found), bytes);
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
  void give_back(buffer_type buffer, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    leased_ -= bytes;
    free_.push_back(std::move(buffer));
  }
  mutable std::mutex mutex_;
  std::vector<buffer_type> free_;
  std::size_t leased_ = 0;
  std::size_t peak_leased_ = 0;
};

}  // namespace shardmesh
