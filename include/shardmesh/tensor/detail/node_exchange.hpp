#pragma once
// An all-to-all step through a node-shared window (comm/node_window.hpp),
// for host memory where the pieces are strided on both sides and the
// group shares a node: each rank packs what it sends into its segment,
// behind a header of where each member's piece starts; once every rank has
// (publish), each unpacks what it receives straight from its peers'
// segments into its new shard, and copies the piece it keeps from shard to
// shard. Out of cache, the copies may store by streaming stores (half the
// memory traffic). Whether this, with which stores, or MPI_Alltoallw on
// datatypes runs is measured per group and size (runtime/collective_tuning.hpp).

#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/detail/collective_support.hpp"
#include "shardmesh/comm/node_window.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"
#include "shardmesh/runtime/mesh_context.hpp"
#include "shardmesh/tensor/detail/pieces.hpp"
#include "shardmesh/tensor/detail/prepared_step.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace shardmesh::detail {

// Runs the all-to-all step p over group through window (collective over
// group), every copy storing as `how` says.
template <class ExecutionSpace, class T>
void node_all_to_all(ExecutionSpace const& exec, communicator const& group, node_window& window,
                     prepared_step<Kokkos::HostSpace> const& p, Kokkos::View<T*, Kokkos::HostSpace> in,
                     Kokkos::View<T*, Kokkos::HostSpace> out, stores how) {
  using view = Kokkos::View<T*, Kokkos::HostSpace>;
  using const_view = Kokkos::View<T const*, Kokkos::HostSpace>;
  check_collective(group.get(), "all_to_all", element_name<T>());
  count_call<T>(group, "all_to_all", p.sends.total, p.receives.total);
  std::size_t const n = p.packed_send_offsets.size();
  auto const me = static_cast<std::size_t>(group.rank());
  std::size_t const header = (n * sizeof(std::size_t) + 63) / 64 * 64;  // the pieces start aligned for any T
  std::byte* const mine = window.acquire(header + p.sends.total * sizeof(T));
  std::memcpy(mine, p.packed_send_offsets.data(), n * sizeof(std::size_t));
  transfer(exec, p.sends, const_view(in), addressing::indexed, view(reinterpret_cast<T*>(mine + header), p.sends.total),
           addressing::packed, how);
  transfer(exec, p.own, const_view(in), addressing::indexed, out, addressing::indexed, how);
  exec.fence("shardmesh::node_all_to_all");
  window.publish();
  for (std::size_t q = 0; q < n; ++q) {
    if (p.recv_counts[q] == 0) continue;  // nothing from q (nor from this rank itself)
    std::byte const* const peer = window.segment(static_cast<int>(q));
    std::size_t at = 0;  // where q packed our piece
    std::memcpy(&at, peer + me * sizeof(std::size_t), sizeof(std::size_t));
    const_view const from(reinterpret_cast<T const*>(peer + header) + at, p.recv_counts[q]);
    transfer(exec, p.receives_from[q], from, addressing::packed, out, addressing::indexed, how);
  }
  exec.fence("shardmesh::node_all_to_all");
}

// The node windows of a mesh's groups (a state of the mesh), one per set of
// axes, their segments recorded in the mesh's ledger as workspace.
class node_windows {
 public:
  explicit node_windows(mesh_context const& context) : ledger_(context.ledger()) {}
  node_windows(node_windows const&) = delete;
  node_windows& operator=(node_windows const&) = delete;
  // Freeing a window synchronizes its group: every rank frees its groups'
  // windows in the order of their axes, the same everywhere, so no two
  // groups wait for each other.
  ~node_windows() {
    for (auto& [axes, w] : windows_) w.reset();
  }

  // The window of the group over `axes`, made on first use (collective over
  // group); null where group's ranks span nodes.
  [[nodiscard]] node_window* of(communicator const& group, axis_set axes) {
    std::lock_guard lock(mutex_);
    auto it = windows_.find(axes.bits);
    if (it == windows_.end()) it = windows_.emplace(axes.bits, std::make_unique<recorded>(group)).first;
    return it->second->window.node_local() ? &it->second->window : nullptr;
  }

  // Bytes of every window's segment on this rank.
  [[nodiscard]] std::size_t bytes() {
    std::lock_guard lock(mutex_);
    std::size_t total = 0;
    for (auto const& [axes, r] : windows_) total += r->window.capacity();
    return total;
  }

  // Records the window of the group over `axes` at its size now (after an exchange grew it).
  void record(axis_set axes) {
    std::lock_guard lock(mutex_);
    recorded& r = *windows_.at(axes.bits);
    if (r.entry.bytes() != r.window.capacity())
      r.entry = ledger_entry(ledger_, memory_category::workspace, r.window.capacity());
  }

 private:
  struct recorded {
    explicit recorded(communicator const& group) : window(group) {}
    node_window window;
    ledger_entry entry;
  };
  std::shared_ptr<memory_ledger> ledger_;
  std::mutex mutex_;
  std::map<decltype(axis_set::bits), std::unique_ptr<recorded>> windows_;
};

}  // namespace shardmesh::detail
