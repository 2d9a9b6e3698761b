#pragma once
// An MPI communicator that frees what it created (a borrowed one, such as
// MPI_COMM_WORLD, is left alone), counts the collectives issued on it, and
// holds the staging policy its collectives hand buffers to MPI with
// (staging.hpp) and whether device memory goes through the vendor's library
// (nccl.hpp), with that library's communicator once made. Communicators
// split from one share its counters and its settings: a mesh's axis groups
// count into the mesh's and stage as it does.

#include "shardmesh/comm/counters.hpp"
#include "shardmesh/comm/staging.hpp"

#include <mpi.h>

#include <atomic>
#include <memory>
#include <utility>

namespace shardmesh {

class communicator {
 public:
  communicator() = default;
  // Borrows comm: the caller keeps ownership.
  static communicator borrow(MPI_Comm comm) { return {comm, false, std::make_shared<comm_counters>(), fresh_policy()}; }
  // Takes ownership of comm: MPI_Comm_free on destruction.
  static communicator adopt(MPI_Comm comm) { return {comm, true, std::make_shared<comm_counters>(), fresh_policy()}; }

  communicator(communicator&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
        owned_(std::exchange(other.owned_, false)),
        counters_(std::move(other.counters_)),
        settings_(std::move(other.settings_)),
        vendor_comm_(std::move(other.vendor_comm_)) {}
  communicator& operator=(communicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(other.owned_, false);
      counters_ = std::move(other.counters_);
      settings_ = std::move(other.settings_);
      vendor_comm_ = std::move(other.vendor_comm_);
    }
    return *this;
  }
  communicator(communicator const&) = delete;
  communicator& operator=(communicator const&) = delete;
  ~communicator() { release(); }

  [[nodiscard]] MPI_Comm get() const { return comm_; }
  [[nodiscard]] int rank() const {
    int r = 0;
    MPI_Comm_rank(comm_, &r);
    return r;
  }
  [[nodiscard]] int size() const {
    int s = 0;
    MPI_Comm_size(comm_, &s);
    return s;
  }
  [[nodiscard]] comm_counters& counters() const { return *counters_; }

  // How the collectives on this communicator, and on every communicator
  // split from it, hand buffers to MPI (staging.hpp): automatic (the
  // default) stages only memory MPI cannot read, always stages every buffer
  // through a host mirror, never stages none. Shared like the counters, so
  // a mesh's policy (mesh.comm().set_staging(...)) holds for its groups and
  // submeshes too. Staging is local: ranks may differ. Takes effect for
  // collectives issued after the call.
  [[nodiscard]] staging_policy staging() const { return settings_->staging.load(std::memory_order_relaxed); }
  void set_staging(staging_policy policy) const { settings_->staging.store(policy, std::memory_order_relaxed); }

  // Whether collectives on device memory go through the vendor's library
  // where the build has it (NCCL or RCCL: nccl.hpp) or through MPI. Shared and
  // taking effect like the staging policy; the vendor's by default. Must be
  // the same on every rank.
  [[nodiscard]] bool vendor_collectives() const { return settings_->vendor.load(std::memory_order_relaxed); }
  void set_vendor_collectives(bool vendor) const { settings_->vendor.store(vendor, std::memory_order_relaxed); }
  // The vendor library's communicator over these ranks, once made (nccl.hpp).
  [[nodiscard]] std::shared_ptr<void>& vendor_comm() const { return vendor_comm_; }

  // Collective over this communicator: the ranks of each color, ordered by
  // key, counting into this communicator's counters.
  [[nodiscard]] communicator split(int color, int key) const {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color, key, &sub);
    return {sub, true, counters_, settings_};
  }
  // Collective: the same ranks on a fresh context (their messages never mix
  // with this communicator's), with fresh counters and a staging policy of
  // its own that starts as this one's.
  [[nodiscard]] communicator dup() const {
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(comm_, &copy);
    communicator out = adopt(copy);
    out.set_staging(staging());
    out.set_vendor_collectives(vendor_collectives());
    return out;
  }

 private:
  struct settings {
    std::atomic<staging_policy> staging{staging_policy::automatic};
    std::atomic<bool> vendor{true};
  };
  using shared_policy = std::shared_ptr<settings>;
  static shared_policy fresh_policy() { return std::make_shared<settings>(); }

  communicator(MPI_Comm comm, bool owned, std::shared_ptr<comm_counters> counters, shared_policy staging)
      : comm_(comm), owned_(owned), counters_(std::move(counters)), settings_(std::move(staging)) {}
  void release() {
    vendor_comm_.reset();  // the vendor's communicator goes before MPI's
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && comm_ != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
    owned_ = false;
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  std::shared_ptr<comm_counters> counters_ = std::make_shared<comm_counters>();
  shared_policy settings_ = fresh_policy();
  mutable std::shared_ptr<void> vendor_comm_;  // made by the first collective that needs it
};

}  // namespace shardmesh
