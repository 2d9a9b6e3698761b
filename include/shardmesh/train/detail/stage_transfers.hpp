#pragma once
// What crosses a pipeline stage boundary: each rank sends its block of an
// activation (or of its gradient) to the rank at the same dp and tp
// coordinates of the next (previous) stage, over the mesh's "pp" group;
// both ends use the same layout, so a block goes to one peer whole. A
// stage's receives are posted ahead of the action that waits for them (a
// window of them in list order), topped up right after each send, while
// the block sent leaves: not when a receive is called, whose block may
// already be there and waits for nothing but the posting. Its sends are
// non-blocking and complete while it computes (the ones done are let go at
// the next send); finish() waits for the last sends.

#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/point_to_point.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/ops/local/reshape.hpp"
#include "shardmesh/strategy/pipeline_schedule.hpp"

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace shardmesh::parallel::detail {

template <class Activation>
class stage_transfers {
 public:
  using exec_type = execution_space_of<typename Activation::memory_space>;
  using flat_view = Kokkos::View<typename Activation::value_type*, typename Activation::memory_space>;
  // A new buffer for what action (a receive) will receive.
  using make_buffer = std::function<Activation(pipeline_action const&)>;

  static constexpr std::size_t window = 2;  // receives posted ahead

  stage_transfers(communicator const& pp, pipeline_schedule const& schedule, std::size_t stage, make_buffer make,
                  exec_type const& exec)
      : pp_(&pp), schedule_(&schedule), stage_(stage), make_(std::move(make)), exec_(exec) {
    for (pipeline_action const& a : schedule.actions[stage])
      if (a.op == pipeline_op::receive_activation || a.op == pipeline_op::receive_gradient) receives_.push_back(a);
    post_ahead();
  }
  stage_transfers(stage_transfers const&) = delete;
  stage_transfers& operator=(stage_transfers const&) = delete;

  // Sends x's block; the block's memory stays held until MPI has sent it.
  void send(pipeline_action const& a, Activation const& x) {
    int const to = peer(a.op == pipeline_op::send_activation);
    request done = isend(*pp_, flat_view(ops::local::flat(x.local())), to, tag(a), exec_);
    release_sent();  // after posting: the peer may be waiting for this block
    sends_.push_back({std::move(done), x.local()});
    post_ahead();  // while this one leaves
  }

  // Waits for the receive action a (the next one in list order); posts
  // receives only when none is posted (receives in a row without a send).
  Activation receive(pipeline_action const& a) {
    if (posted_.empty()) post_ahead();
    if (posted_.empty() || posted_.front().action != a)
      throw invalid_option_error("pipeline: stage " + std::to_string(stage_) + " waits for " +
                                 std::string(describe(a).view()) + " out of its schedule's order");
    pending r = std::move(posted_.front());
    posted_.pop_front();
    r.done.wait();
    return std::move(r.buffer);
  }

  // Advances the transfers without blocking (one test drives MPI's progress
  // for every request) and lets go of the sends that have left.
  void progress() {
    if (!posted_.empty()) posted_.front().done.test();
    release_sent();
  }
  void finish() {
    for (sent& s : sends_) s.done.wait();
    sends_.clear();
  }

 private:
  struct pending {
    request done;
    Activation buffer;
    pipeline_action action{};
  };
  struct sent {
    request done;
    typename Activation::view_type block;  // holds the memory (a flat view of it would not)
  };

  // Activations go to the next stage and come from the previous one, gradients the other way.
  [[nodiscard]] int peer(bool downstream) const {
    std::size_t const p = schedule_->stages;
    return static_cast<int>(downstream ? (stage_ + 1) % p : (stage_ + p - 1) % p);
  }
  // One tag per direction, micro-batch and receiving virtual stage (a
  // chunk's number changes from the last stage to the first), so that
  // transfers match whatever their order of arrival.
  [[nodiscard]] int tag(pipeline_action const& a) const {
    bool const gradient = a.op == pipeline_op::send_gradient || a.op == pipeline_op::receive_gradient;
    std::size_t vs = schedule_->virtual_stage(stage_, a.chunk);
    if (a.op == pipeline_op::send_activation) ++vs;
    if (a.op == pipeline_op::send_gradient) --vs;
    return static_cast<int>(((gradient ? 1 : 0) + 2 * (vs + schedule_->virtual_stages() * a.micro)) % 32766) + 1;
  }

  // Frees the sends MPI has completed (the waits so far have driven their
  // progress): a completed request left pending keeps its MPI request and
  // its buffer for nothing.
  void release_sent() {
    while (!sends_.empty() && sends_.front().done.test()) sends_.pop_front();
  }

  void post_ahead() {
    for (; posted_.size() < window && next_ < receives_.size(); ++next_) {
      pipeline_action const& a = receives_[next_];
      Activation buffer = make_(a);
      int const from = peer(a.op == pipeline_op::receive_gradient);
      request r = irecv(*pp_, flat_view(ops::local::flat(buffer.local())), from, tag(a), exec_);
      posted_.push_back({std::move(r), std::move(buffer), a});
    }
  }

  communicator const* pp_;
  pipeline_schedule const* schedule_;
  std::size_t stage_;
  make_buffer make_;
  exec_type exec_;
  std::vector<pipeline_action> receives_;  // in list order
  std::size_t next_ = 0;                   // the first receive not yet posted
  std::deque<pending> posted_;
  std::deque<sent> sends_;
};

}  // namespace shardmesh::parallel::detail
