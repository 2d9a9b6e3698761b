#pragma once
// Memory every rank of a communicator can read directly, where all of them
// share one node (an MPI-3 shared-memory window): each rank owns a segment
// and reads its peers' segments with plain loads. An exchange through it
// copies each element twice, into the sender's segment and out of it into
// the receiver's buffer, where a two-sided transfer of a piece strided on
// both sides passes MPI's datatype engine on both ends or adds a pack and
// an unpack around MPI's own copy (tensor/detail/node_exchange.hpp).
//
// The segments grow as exchanges ask: acquire() agrees on the largest size
// any rank needs (one small all-reduce, which is also what keeps a rank from
// overwriting its segment while a peer still reads the last exchange's
// data) and reallocates collectively when it outgrows the window.

#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/comm/communicator.hpp"

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace shardmesh {

class node_window {
 public:
  // Collective over comm: finds whether its ranks share one node (the same
  // answer on every rank, since a communicator spanning nodes is larger than
  // each rank's node-local part of it).
  explicit node_window(communicator const& comm) {
    MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_);
    int node_size = 0;
    MPI_Comm_size(node_, &node_size);
    if (node_size != comm.size()) MPI_Comm_free(&node_);
  }
  node_window(node_window const&) = delete;
  node_window& operator=(node_window const&) = delete;
  // Collective where a window was made (MPI_Win_free synchronizes): meshes
  // go away in the same order on every rank.
  ~node_window() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized != 0) return;
    release();
    if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
  }

  // Whether the communicator's ranks share a node (else nothing else may be called).
  [[nodiscard]] bool node_local() const { return node_ != MPI_COMM_NULL; }

  // Collective: this rank's segment, at least as large as the largest
  // `bytes` any rank asks for, once every rank has finished reading the
  // segments of the exchange before.
  [[nodiscard]] std::byte* acquire(std::size_t bytes) {
    auto need = static_cast<std::uint64_t>(bytes);
    if (window_ != MPI_WIN_NULL) MPI_Win_sync(window_);  // the peers' reads before our next writes
    {
      detail::blocked_in const waiting("node_window");
      MPI_Allreduce(MPI_IN_PLACE, &need, 1, MPI_UINT64_T, MPI_MAX, node_);
    }
    if (window_ != MPI_WIN_NULL) MPI_Win_sync(window_);
    if (need > capacity_) grow(need);
    return segments_[static_cast<std::size_t>(rank())];
  }

  // Collective: what each rank wrote into its segment is visible to every
  // rank (the memory-model pattern the standard gives for shared windows).
  void publish() const {
    MPI_Win_sync(window_);
    {
      detail::blocked_in const waiting("node_window");
      MPI_Barrier(node_);
    }
    MPI_Win_sync(window_);
  }

  // Member q's segment (after publish, what it wrote there).
  [[nodiscard]] std::byte const* segment(int q) const { return segments_[static_cast<std::size_t>(q)]; }
  // Bytes of each segment.
  [[nodiscard]] std::size_t capacity() const { return capacity_; }

 private:
  [[nodiscard]] int rank() const {
    int r = 0;
    MPI_Comm_rank(node_, &r);
    return r;
  }

  // A new window of at least `need` bytes per segment (half as much again,
  // so that slowly growing exchanges reallocate rarely), page-aligned
  // segments each in its owner's memory.
  void grow(std::uint64_t need) {
    release();
    std::size_t const page = 4096;
    capacity_ = (need + need / 2 + page - 1) / page * page;
    MPI_Info info = MPI_INFO_NULL;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    std::byte* mine = nullptr;
    MPI_Win_allocate_shared(static_cast<MPI_Aint>(capacity_), 1, info, node_, &mine, &window_);
    MPI_Info_free(&info);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);
    int n = 0;
    MPI_Comm_size(node_, &n);
    segments_.assign(static_cast<std::size_t>(n), nullptr);
    for (int q = 0; q < n; ++q) {
      MPI_Aint size = 0;
      int unit = 0;
      MPI_Win_shared_query(window_, q, &size, &unit, &segments_[static_cast<std::size_t>(q)]);
    }
  }

  void release() {
    if (window_ == MPI_WIN_NULL) return;
    MPI_Win_unlock_all(window_);
    MPI_Win_free(&window_);
    capacity_ = 0;
  }

  MPI_Comm node_ = MPI_COMM_NULL;  // the communicator's ranks, in its order, where they share a node
  MPI_Win window_ = MPI_WIN_NULL;
  std::size_t capacity_ = 0;
  std::vector<std::byte*> segments_;
};

}  // namespace shardmesh
