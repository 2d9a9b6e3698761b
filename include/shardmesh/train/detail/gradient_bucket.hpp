#pragma once
// Gradients reduced together: one collective over the "dp" group for the
// parameters of a bucket, started as soon as backward has produced the last
// of them.
//
// Each member's reduction is, by the algebra's plan, one step on the dp
// axis: all_reduce (accumulate -> compute, ZeRO 0 and 1) or reduce_scatter
// onto dimension 0 (accumulate -> compute with dp appended to dimension 0,
// ZeRO 2 and 3); the constructor checks it. The bucket fuses these steps:
// for a reduce-scatter, the send buffer is rank-major (dp_parts.hpp), so that MPI's reduce-scatter
// with those counts leaves each rank exactly its blocks of the reduced
// layout. An all-reduce runs in place on the concatenated blocks. The
// reduce-scatter is MPI's or the ring on point-to-point messages, whichever
// the mesh measured faster for this size (runtime/collective_tuning.hpp).
// The buffers are the bucket's own, recorded as workspace, of the type the
// gradients are reduced in: float (whatever the type they are kept in:
// packed widened, handed out rounded), or bf16
// (training_options::gradient_reduction: packed rounded, summed by MPI per
// message (comm/reduced_precision.hpp: half the bytes, a rounding per hop),
// handed out in the type they are kept in).

#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/comm/reduce_scatter.hpp"
#include "shardmesh/comm/reduced_precision.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/comm/ring_reduce_scatter.hpp"
#include "shardmesh/runtime/collective_tuning.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"
#include "shardmesh/strategy/precision.hpp"
#include "shardmesh/tensor/dtensor.hpp"
#include "shardmesh/train/detail/block_copy.hpp"
#include "shardmesh/train/detail/dp_parts.hpp"
#include "shardmesh/train/detail/trainable.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace shardmesh::parallel::detail {

template <class T, class MemorySpace>
class gradient_bucket {
 public:
  using member = trainable<T, MemorySpace>;
  using G = typename member::grad_type;
  using flat_view = typename member::grad_view;
  using grad_block = typename member::grad_block;
  using exec_type = execution_space_of<MemorySpace>;

  // members: parameters whose reduction plan is one step of the same kind
  // on axis dp, in the order backward completes their gradients. tag: a
  // number the bucket's messages carry, different for each bucket of the
  // same dp group and the same on every rank.
  gradient_bucket(std::vector<member*> members, std::size_t dp, int tag, precision reduce_in = precision::fp32)
      : members_(std::move(members)), tag_(tag) {
    device_mesh const& mesh = members_.front()->mesh();
    group_ = &mesh.group(axis_set::of(dp));
    n_ = static_cast<std::size_t>(group_->size());
    me_ = mesh.coordinates()[dp];
    for (member* m : members_) {
      step_kind const k = reduction_kind(*m, dp);
      if (m != members_.front() && k != kind_)
        throw std::logic_error("gradient bucket: " + m->name() + " reduces by another collective");
      kind_ = k;
    }
    std::vector<std::pair<std::size_t, std::size_t>> rows;
    for (member* m : members_) rows.emplace_back(m->rows(), m->row_elements());
    parts_ = dp_parts(std::move(rows), n_);
    std::size_t const received = kind_ == step_kind::reduce_scatter ? parts_.counts()[me_] : 0;
    auto const buffer = [](auto& v, std::size_t n) {
      v = std::remove_reference_t<decltype(v)>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "shardmesh::gradient_bucket"), n);
    };
    narrow_ = reduce_in == precision::bf16;
    if (narrow_) {
      buffer(narrow_send_, parts_.total());
      buffer(narrow_recv_, received);
    } else {
      buffer(send_, parts_.total());
      buffer(recv_, received);
      if (kind_ == step_kind::reduce_scatter && n_ > 2)  // the ring's steps before its last receive here
        buffer(scratch_, *std::max_element(parts_.counts().begin(), parts_.counts().end()));
    }
    buffers_ = mesh.track(memory_category::workspace, (send_.size() + recv_.size() + scratch_.size()) * sizeof(G) +
                                                          (narrow_send_.size() + narrow_recv_.size()) * sizeof(bf16));
  }

  [[nodiscard]] std::vector<member*> const& members() const { return members_; }
  // The dp group, and how the members' rows split over it.
  [[nodiscard]] communicator const& group() const { return *group_; }
  [[nodiscard]] dp_parts const& parts() const { return parts_; }
  [[nodiscard]] step_kind kind() const { return kind_; }
  // Elements this rank contributes.
  [[nodiscard]] std::size_t elements() const { return parts_.total(); }
  // The stage whose backward completes the bucket (stages run backward).
  [[nodiscard]] std::size_t ready_stage() const {
    std::size_t s = members_.front()->stage();
    for (member const* m : members_) s = std::min(s, m->stage());
    return s;
  }
  [[nodiscard]] bool started() const { return pending_.has_value() || ring_.has_value(); }

  // Packs the members' accumulated gradients (one kernel), drops them and
  // posts the collective.
  void start(exec_type const& exec) {
    blocks_.clear();
    std::size_t at = 0;
    for (std::size_t q = 0; q < n_; ++q)
      for (std::size_t m = 0; m < members_.size(); ++m) {
        grad_block const block = members_[m]->accumulated();
        std::pair<std::size_t, std::size_t> const rows = part(block.size(), m, q);
        add_block(at, rows.second - rows.first, block, rows.first);
        at += rows.second - rows.first;
      }
    if (narrow())
      blocks_.pack(exec, narrow_send_);
    else
      blocks_.pack(exec, send_);
    exec.fence("shardmesh::gradient_bucket");  // packed: MPI may read it, the gradients may go
    for (member* m : members_) m->zero_grad();
    if (narrow()) {
      constexpr auto rounded = sixteen_bit_sum::per_message;
      if (kind_ == step_kind::all_reduce)
        pending_.emplace(iall_reduce(*group_, narrow_send_, reduce_op::sum, completion::deferred, exec, rounded));
      else
        pending_.emplace(ireduce_scatter_v(*group_, narrow_send_, narrow_recv_, parts_.counts(), reduce_op::sum,
                                           completion::deferred, exec, rounded));
      return;
    }
    collective_tuning& tuning = members_.front()->mesh().template state<collective_tuning>();
    if (kind_ == step_kind::all_reduce)
      pending_.emplace(iall_reduce(*group_, send_, reduce_op::sum, completion::deferred, exec));
    else if (tuning.reduce_scatter<G, MemorySpace>(*group_, parts_.counts(), exec) == reduce_scatter_algorithm::ring)
      ring_.emplace(*group_, send_, recv_, parts_.counts(), tag_, scratch_, exec);
    else
      pending_.emplace(
          ireduce_scatter_v(*group_, send_, recv_, parts_.counts(), reduce_op::sum, completion::deferred, exec));
  }

  // Advances the collective without blocking.
  void progress() {
    if (pending_) pending_->test();
    if (ring_) ring_->test();
  }

  // Waits for the collective and gives each member its reduced gradient.
  void finish(exec_type const& exec) {
    if (pending_) pending_->wait();
    if (ring_) ring_->wait();
    pending_.reset();
    ring_.reset();
    bool const in_place = kind_ == step_kind::all_reduce;
    blocks_.clear();
    std::size_t at = 0;
    for (member* m : members_) {
      grad_block const to = m->new_reduced();
      add_block(at, to.size(), to, 0);
      at += to.size();
    }
    if (narrow())
      blocks_.unpack(exec, in_place ? narrow_send_ : narrow_recv_);
    else
      blocks_.unpack(exec, in_place ? send_ : recv_);
    exec.fence("shardmesh::gradient_bucket");
  }

 private:
  // The one collective on dp that takes m's gradient from its accumulated
  // layout to its reduced one, as the bucket runs it on the flattened rows:
  // an all-reduce where the reduced layout is the accumulated one summed, a
  // reduce-scatter where it is that with dim 0 further split by dp (dp the
  // innermost of dim 0's axes). The algebra's cheapest plan may differ (on
  // dp = 4 x tp = 2 it first slices a replicated vector on tp, then
  // reduce-scatters and all-to-alls, moving fewer bytes); the bucket trades
  // that for one collective over all its members.
  static step_kind reduction_kind(member const& m, std::size_t dp) {
    bound_layout const& from = m.layouts().accumulate;
    bound_layout summed = from;
    summed.partial_axes.erase(dp);
    if (from.partial_axes == axis_set::of(dp)) {
      if (m.layouts().reduced == summed) return step_kind::all_reduce;
      bound_layout scattered = summed;
      shardmesh::detail::append_axis(scattered.dims[0], dp);
      if (from.rank > 0 && m.layouts().reduced == scattered) return step_kind::reduce_scatter;
    }
    throw std::logic_error("gradient bucket: the reduction of " + m.name() +
                           " is not one all-reduce or reduce-scatter on the dp axis");
  }

  // The elements of member m's block (of `size`) that group rank q receives
  // (all of it for an all-reduce, taken once).
  [[nodiscard]] std::pair<std::size_t, std::size_t> part(std::size_t size, std::size_t m, std::size_t q) const {
    if (kind_ == step_kind::all_reduce) return {0, q == 0 ? size : 0};
    return parts_.part(m, q);
  }

  using narrow_view = Kokkos::View<bf16*, MemorySpace>;
  [[nodiscard]] bool narrow() const { return narrow_; }

  // The buffer's elements [at, at + size) and a block's from `first` on.
  void add_block(std::size_t at, std::size_t size, grad_block const& block, std::size_t first) {
    if (block.in_value_type)
      blocks_.add(at, size, nullptr, block.narrow.data() + first);
    else
      blocks_.add(at, size, block.wide.data() + first, nullptr);
  }

  std::vector<member*> members_;
  int tag_;
  communicator const* group_ = nullptr;
  std::size_t n_ = 1, me_ = 0;
  step_kind kind_ = step_kind::all_reduce;
  dp_parts parts_;
  flat_view send_, recv_, scratch_;        // reduced in float
  narrow_view narrow_send_, narrow_recv_;  // reduced in bf16
  bool narrow_ = false;
  ledger_entry buffers_;
  std::optional<request> pending_;
  std::optional<ring_reduce_scatter<G, MemorySpace>> ring_;
  block_copy<G, T, MemorySpace> blocks_;
};

}  // namespace shardmesh::parallel::detail
