#pragma once
// A pending non-blocking operation: one or more MPI requests and what to do
// once they complete (copy staged data back, say). Destruction waits, so no
// MPI operation outlives the buffers it uses.

#include "shardmesh/comm/collective_debug.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>
#include <Kokkos_Profiling_ScopedRegion.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardmesh {

// When a collective runs: posted non-blocking, completed later through its
// request (deferred), or run to completion inside the call with MPI's
// blocking collective (immediate), which MPI libraries often implement with
// faster algorithms than the non-blocking one. Blocking forms use immediate.
enum class completion { deferred, immediate };

class request {
 public:
  // At most two MPI requests (a collective, or an exchange's send and
  // receive), held inline: a request is made per transfer, often for a few
  // microseconds of work, so it allocates nothing itself.
  static constexpr std::size_t capacity = 2;

  request() = default;
  // op names the operation ("all_reduce", "send"), a string that outlives the request.
  request(char const* op, std::initializer_list<MPI_Request> requests, std::function<void()> on_complete = {})
      : op_(op), on_complete_(std::move(on_complete)) {
    if (requests.size() > capacity) throw std::length_error("shardmesh::request holds at most two MPI requests");
    std::copy(requests.begin(), requests.end(), requests_.begin());
    count_ = static_cast<int>(requests.size());
  }
  request(request&& other) noexcept { *this = std::move(other); }
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      wait();
      op_ = other.op_;
      requests_ = other.requests_;
      count_ = std::exchange(other.count_, 0);
      on_complete_ = std::exchange(other.on_complete_, {});
    }
    return *this;
  }
  request(request const&) = delete;
  request& operator=(request const&) = delete;
  ~request() { wait(); }

  // This request, with `next` run after what it already does on completion.
  [[nodiscard]] request then(std::function<void()> next) && {
    if (count_ == 0) {  // already complete
      next();
      return std::move(*this);
    }
    on_complete_ = [first = std::move(on_complete_), next = std::move(next)] {
      if (first) first();
      next();
    };
    return std::move(*this);
  }

  // Completes the operation if it has finished; never blocks.
  bool test() {
    if (count_ == 0) return true;
    int done = 0;
    MPI_Testall(count_, requests_.data(), &done, MPI_STATUSES_IGNORE);
    if (done != 0) complete();
    return done != 0;
  }

  void wait() {
    if (count_ == 0) return;
    // The region's name is made only when a tool listens (a wait is often a few microseconds).
    std::optional<Kokkos::Profiling::ScopedRegion> region;
    if (Kokkos::Tools::profileLibraryLoaded()) region.emplace(std::string("shardmesh::") + op_ + "::wait");
    {
      detail::blocked_in const waiting(op_);
      MPI_Waitall(count_, requests_.data(), MPI_STATUSES_IGNORE);
    }
    complete();
  }

 private:
  void complete() {
    count_ = 0;
    if (on_complete_) std::exchange(on_complete_, {})();
  }
  char const* op_ = "";
  std::array<MPI_Request, capacity> requests_{};
  int count_ = 0;
  std::function<void()> on_complete_;
};

}  // namespace shardmesh
