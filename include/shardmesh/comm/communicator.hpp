#pragma once
// An MPI communicator that frees what it created: a borrowed one (such as
// MPI_COMM_WORLD) is left alone.

#include <mpi.h>

#include <utility>

namespace shardmesh {

class communicator {
 public:
  communicator() = default;
  // Borrows comm: the caller keeps ownership.
  static communicator borrow(MPI_Comm comm) { return communicator(comm, false); }
  // Takes ownership of comm: MPI_Comm_free on destruction.
  static communicator adopt(MPI_Comm comm) { return communicator(comm, true); }

  communicator(communicator&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)), owned_(std::exchange(other.owned_, false)) {}
  communicator& operator=(communicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(other.owned_, false);
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
  // Collective over this communicator: the ranks of each color, ordered by key.
  [[nodiscard]] communicator split(int color, int key) const {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color, key, &sub);
    return adopt(sub);
  }

 private:
  communicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {}
  void release() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && comm_ != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
    owned_ = false;
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
};

}  // namespace shardmesh
