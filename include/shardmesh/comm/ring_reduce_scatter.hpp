#pragma once
// Reduce-scatter (sum) by the ring algorithm on point-to-point messages, for
// MPI libraries whose MPI_Reduce_scatter does not reach the bandwidth
// bound (Open MPI 5's is slower than its own all-reduce of the same buffer).
// n-1 steps: in step k rank r sends its partial sum of block (r-1-k) mod n
// to rank r+1, receives the partial sum of block (r-2-k) mod n from rank
// r-1 and adds it into its own with a Kokkos kernel. The last step receives
// block r itself straight into the result and adds this rank's block to it:
// no copy at the end, and no scratch buffer on 2 ranks. Each rank sends every
// block but its own once and receives every block but its left neighbour's
// once: (n-1)/n of the buffer for equal blocks, the bound. Blocks may differ
// in size. Counted as one "reduce_scatter" call with those bytes.
//
// Non-blocking: test() completes a step that has finished and posts the
// next, so the ring advances whenever its owner calls test() (between
// layers of a backward pass, say), not on MPI's schedule. Rings in flight
// together on one communicator need different tags: their steps advance at
// different times on different ranks, and messages of equal tags would
// match across rings.

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/point_to_point.hpp"
#include "shardmesh/comm/request.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace shardmesh {

namespace detail {

// into += from, elementwise (a free function: nvcc takes no extended lambda in a private member).
template <class T, class Space>
void add_into(execution_space_of<Space> const& exec, Kokkos::View<T*, Space> const& into,
              Kokkos::View<T*, Space> const& from) {
  Kokkos::parallel_for(
      "shardmesh::ring_reduce_scatter_add",
      Kokkos::RangePolicy<execution_space_of<Space>, Kokkos::IndexType<std::size_t>>(exec, 0, into.extent(0)),
      KOKKOS_LAMBDA(std::size_t i) { into(i) += from(i); });
}

}  // namespace detail

template <class T, class Space>
class ring_reduce_scatter {
  static_assert(
      !float16_element<T>,
      "ring_reduce_scatter sums hop by hop in T: reduce 16-bit floats widened to float (reduced_precision.hpp)");

 public:
  using view = Kokkos::View<T*, Space>;

  // data: this rank's contribution, block q of counts[q] elements after
  // block q-1; overwritten by partial sums. recv: counts[rank] elements, the
  // reduced block. scratch: where the steps before the last receive, at
  // least the largest count (allocated here if smaller; unused on 2 ranks):
  // a caller that reduces often keeps one. Posts the first step.
  ring_reduce_scatter(communicator const& comm, view data, view recv, std::vector<std::size_t> counts, int tag = 0,
                      view scratch = {}, execution_space_of<Space> const& exec = {})
      : comm_(&comm),
        data_(std::move(data)),
        recv_(std::move(recv)),
        counts_(std::move(counts)),
        offsets_(detail::offsets(counts_)),
        exec_(exec),
        tag_(tag),
        n_(static_cast<std::size_t>(comm.size())),
        r_(static_cast<std::size_t>(comm.rank())) {
    std::size_t const left = (r_ + n_ - 1) % n_;
    detail::count_call<T>(comm, "reduce_scatter", detail::sum_except(counts_, r_), detail::sum_except(counts_, left));
    std::size_t const largest = *std::max_element(counts_.begin(), counts_.end());
    scratch_ = n_ <= 2 || scratch.extent(0) >= largest
                   ? std::move(scratch)
                   : view(Kokkos::view_alloc(Kokkos::WithoutInitializing, "shardmesh::ring_reduce_scatter"), largest);
    post();
  }

  // Advances without blocking; true once recv holds the result.
  bool test() {
    while (step_) {
      if (!step_->test()) return false;
      finish_step();
    }
    return true;
  }

  void wait() {
    while (step_) {
      step_->wait();
      finish_step();
    }
  }

 private:
  [[nodiscard]] view block(std::size_t q) const {
    return Kokkos::subview(data_, std::pair(offsets_[q], offsets_[q] + counts_[q]));
  }
  [[nodiscard]] std::size_t received_block() const { return (r_ + 2 * n_ - 2 - k_) % n_; }

  [[nodiscard]] bool last_step() const { return k_ + 2 == n_; }
  // Where step k receives: the result in the last step, else scratch.
  [[nodiscard]] view received() const {
    if (last_step()) return recv_;
    return Kokkos::subview(scratch_, std::pair(std::size_t{0}, counts_[received_block()]));
  }

  void post() {
    if (n_ == 1) {  // alone: its block is the sum
      Kokkos::deep_copy(exec_, recv_, block(r_));
      exec_.fence("shardmesh::ring_reduce_scatter");
      return;
    }
    if (k_ + 1 >= n_) return;  // done
    std::size_t const sent = (r_ + 2 * n_ - 1 - k_) % n_;
    view const into = received();
    step_.emplace(detail::post_exchange(*comm_, block(sent), static_cast<int>((r_ + 1) % n_), into,
                                        static_cast<int>((r_ + n_ - 1) % n_), tag_, exec_));
  }

  void finish_step() {
    step_.reset();
    if (last_step())
      detail::add_into(exec_, recv_, block(r_));
    else
      detail::add_into(exec_, block(received_block()), scratch_);
    exec_.fence("shardmesh::ring_reduce_scatter");
    ++k_;
    post();
  }

  communicator const* comm_;
  view data_, recv_, scratch_;
  std::vector<std::size_t> counts_, offsets_;
  execution_space_of<Space> exec_;
  int tag_;
  std::size_t n_, r_, k_ = 0;
  std::optional<request> step_;
};

}  // namespace shardmesh
