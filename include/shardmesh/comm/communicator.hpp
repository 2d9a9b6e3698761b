#pragma once
// An MPI communicator that frees what it created (a borrowed one, such as
// MPI_COMM_WORLD, is left alone) and counts the collectives issued on it.
// Communicators split from one share its counters: a mesh's axis groups
// count into the mesh's.

#include "shardmesh/comm/counters.hpp"

#include <mpi.h>

#include <memory>
#include <utility>

namespace shardmesh {

class communicator {
 public:
  communicator() = default;
  // Borrows comm: the caller keeps ownership.
  static communicator borrow(MPI_Comm comm) { return {comm, false, std::make_shared<comm_counters>()}; }
  // Takes ownership of comm: MPI_Comm_free on destruction.
  static communicator adopt(MPI_Comm comm) { return {comm, true, std::make_shared<comm_counters>()}; }

  communicator(communicator&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
        owned_(std::exchange(other.owned_, false)),
        counters_(std::move(other.counters_)) {}
  communicator& operator=(communicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(other.owned_, false);
      counters_ = std::move(other.counters_);
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

  // Collective over this communicator: the ranks of each color, ordered by
  // key, counting into this communicator's counters.
  [[nodiscard]] communicator split(int color, int key) const {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color, key, &sub);
    return {sub, true, counters_};
  }
  // Collective: the same ranks on a fresh context (their messages never mix
  // with this communicator's), with fresh counters.
  [[nodiscard]] communicator dup() const {
    MPI_Comm copy = MPI_COMM_NULL;
    MPI_Comm_dup(comm_, &copy);
    return adopt(copy);
  }

 private:
  communicator(MPI_Comm comm, bool owned, std::shared_ptr<comm_counters> counters)
      : comm_(comm), owned_(owned), counters_(std::move(counters)) {}
  void release() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && comm_ != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
    owned_ = false;
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  std::shared_ptr<comm_counters> counters_ = std::make_shared<comm_counters>();
};

}  // namespace shardmesh
