#pragma once
// Several parameters gathered over the "dp" group by one all-gather: each
// rank holds, of every member, the rows of its compute-layout block that
// the state layout gives it (dp_parts.hpp), and every rank ends with every
// member's whole block. ZeRO-3 gathers a model stage's stored values so;
// ZeRO-1 and 2 return a bucket's updated values so.
//
// start() packs this rank's part of each member into a send buffer and
// posts MPI's all-gather into a rank-major receive buffer; finish() waits
// and copies each rank's part of each member into the member's block (one
// kernel each, train/detail/block_copy.hpp). Both
// buffers are leased from the mesh's workspace for the time in between (so
// two gathers in flight hold two pairs, and none holds any between steps).
// The copies run on the instance given (the trainer's side instance,
// runtime/side_instance.hpp), after the sources' writer has finished.

#include "shardmesh/comm/all_gather.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/request.hpp"
#include "shardmesh/runtime/workspace.hpp"
#include "shardmesh/train/detail/block_copy.hpp"
#include "shardmesh/train/detail/dp_parts.hpp"

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace shardmesh::parallel::detail {

template <class T, class MemorySpace>
class fused_gather {
 public:
  using flat_view = Kokkos::View<T*, MemorySpace>;
  using exec_type = execution_space_of<MemorySpace>;

  // parts: the members' rows over `group`, in which this rank is `me`.
  fused_gather(device_mesh const& mesh, communicator const& group, dp_parts parts)
      : mesh_(mesh), group_(&group), me_(static_cast<std::size_t>(group.rank())), parts_(std::move(parts)) {}

  [[nodiscard]] bool started() const { return pending_.has_value(); }

  // Starts gathering: sources[m] is this rank's part of member m (its rows,
  // flat), targets[m] where its whole block goes (flat; it may hold the
  // source). Both stay alive until finish(). The sources are packed on
  // `exec` once what `written_on` has queued (their writer) is done.
  void start(std::vector<flat_view> const& sources, std::vector<flat_view> targets, exec_type const& exec,
             exec_type const& written_on) {
    if (sources.size() != parts_.members() || targets.size() != parts_.members())
      throw std::logic_error("fused gather: a source and a target per member");
    std::vector<std::size_t> const& counts = parts_.counts();
    std::size_t const total = parts_.total();
    lease_ = workspace_of<MemorySpace>(mesh_).acquire((counts[me_] + total) * sizeof(T));
    flat_view const all = lease_->template as<T>(counts[me_] + total);
    flat_view const send = Kokkos::subview(all, std::pair(std::size_t{0}, counts[me_]));
    recv_ = Kokkos::subview(all, std::pair(counts[me_], counts[me_] + total));
    written_on.fence("shardmesh::fused_gather: its sources written");
    blocks_.clear();
    std::size_t at = 0;
    for (std::size_t m = 0; m < sources.size(); ++m) {
      auto const [begin, end] = parts_.part(m, me_);
      if (sources[m].size() != end - begin || targets[m].size() != parts_.elements(m))
        throw std::logic_error("fused gather: a member's source or target has another size than its rows");
      blocks_.add(at, end - begin, sources[m].data(), nullptr);
      at += end - begin;
    }
    blocks_.pack(exec, send);
    targets_ = std::move(targets);
    exec.fence("shardmesh::fused_gather: packed before MPI reads it");
    pending_.emplace(iall_gather_v(*group_, send, recv_, counts, completion::deferred, exec));
  }

  // Advances the all-gather without blocking.
  void progress() {
    if (pending_) pending_->test();
  }

  // Waits for the all-gather and fills every member's block on `exec`,
  // fenced: any instance may read the blocks after it.
  void finish(exec_type const& exec) {
    if (!pending_) throw std::logic_error("fused gather: finish() without start()");
    pending_->wait();
    pending_.reset();
    blocks_.clear();
    std::size_t at = 0;
    for (std::size_t q = 0; q < parts_.ranks(); ++q)
      for (std::size_t m = 0; m < targets_.size(); ++m) {
        auto const [begin, end] = parts_.part(m, q);
        blocks_.add(at, end - begin, targets_[m].data() + begin, nullptr);
        at += end - begin;
      }
    blocks_.unpack(exec, recv_);
    exec.fence("shardmesh::fused_gather: unpacked");
    targets_.clear();
    recv_ = {};
    lease_.reset();
  }

 private:
  device_mesh mesh_;
  communicator const* group_;
  std::size_t me_;
  dp_parts parts_;
  std::shared_ptr<typename workspace<MemorySpace>::lease> lease_;
  flat_view recv_;
  std::vector<flat_view> targets_;
  std::optional<request> pending_;
  block_copy<T, T, MemorySpace> blocks_;  // the pack, then the unpack
};

}  // namespace shardmesh::parallel::detail
