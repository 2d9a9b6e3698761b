#pragma once
// A pending non-blocking operation: one or more MPI requests and what to do
// once they complete (copy staged data back, say). Destruction waits, so no
// MPI operation outlives the buffers it uses.

#include <mpi.h>
#include <Kokkos_Core.hpp>
#include <Kokkos_Profiling_ScopedRegion.hpp>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh {

// When a collective runs: posted non-blocking, completed later through its
// request (deferred), or run to completion inside the call with MPI's
// blocking collective (immediate), which MPI libraries often implement with
// faster algorithms than the non-blocking one. Blocking forms use immediate.
enum class completion { deferred, immediate };

class request {
 public:
  request() = default;
  request(std::string name, std::vector<MPI_Request> requests, std::function<void()> on_complete = {})
      : name_(std::move(name)), requests_(std::move(requests)), on_complete_(std::move(on_complete)) {}
  request(request&& other) noexcept { *this = std::move(other); }
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      wait();
      name_ = std::move(other.name_);
      requests_ = std::exchange(other.requests_, {});
      on_complete_ = std::exchange(other.on_complete_, {});
    }
    return *this;
  }
  request(request const&) = delete;
  request& operator=(request const&) = delete;
  ~request() { wait(); }

  // Completes the operation if it has finished; never blocks.
  bool test() {
    if (requests_.empty()) return true;
    int done = 0;
    MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
    if (done != 0) complete();
    return done != 0;
  }

  void wait() {
    if (requests_.empty()) return;
    // The region's name is made only when a tool listens (a wait is often a few microseconds).
    std::optional<Kokkos::Profiling::ScopedRegion> region;
    if (Kokkos::Tools::profileLibraryLoaded()) region.emplace(name_ + "::wait");
    MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
    complete();
  }

 private:
  void complete() {
    requests_.clear();
    if (on_complete_) std::exchange(on_complete_, {})();
  }
  std::string name_;
  std::vector<MPI_Request> requests_;
  std::function<void()> on_complete_;
};

}  // namespace shardmesh
