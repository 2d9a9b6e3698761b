#pragma once
// What a device mesh owns at run time, shared by every copy of its handle:
// its communicator (whose counters count every collective on the mesh and
// its axis groups), its axis groups and submeshes, its plans, its memory
// ledger, and state that higher layers attach per type (workspaces and
// prepared steps per memory space). Nothing is process-wide: two meshes in
// one program share none of it.
//
// Thread safety: the caches, counters, workspace and ledger take a lock per
// use, so any thread may use them. Operations that communicate follow MPI's
// rule for one communicator: every rank issues them in the same order, one
// thread at a time per mesh.

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/plan_cache.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"

#include <Kokkos_Core.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <typeindex>
#include <utility>

namespace shardmesh::detail {

class mesh_context : public std::enable_shared_from_this<mesh_context> {
 public:
  // Precondition: comm has shape.size() ranks and every rank gives the same shape.
  mesh_context(communicator comm, mesh_shape const& shape, std::shared_ptr<memory_ledger> ledger, cost_model model)
      : comm_(std::move(comm)),
        shape_(shape),
        coordinates_(coordinates_of(shape, static_cast<std::size_t>(comm_.rank()))),
        ledger_(std::move(ledger)),
        plans_(shape, model) {}

  [[nodiscard]] communicator const& comm() const { return comm_; }
  [[nodiscard]] mesh_shape const& shape() const { return shape_; }
  [[nodiscard]] mesh_coordinates const& coordinates() const { return coordinates_; }
  [[nodiscard]] std::size_t rank() const { return rank_of(shape_, coordinates_); }
  [[nodiscard]] std::shared_ptr<memory_ledger> const& ledger() const { return ledger_; }
  [[nodiscard]] plan_cache& plans() { return plans_; }

  // The ranks that differ from this one only on `axes`, ranked by
  // group_position. Collective over the mesh on first use of `axes`.
  [[nodiscard]] communicator const& group(axis_set axes) {
    std::lock_guard lock(mutex_);
    auto it = groups_.find(axes.bits);
    if (it == groups_.end()) it = groups_.emplace(axes.bits, split(axes)).first;
    return it->second;
  }

  // The context of this rank's submesh on `axes`, made by make() on first
  // use (which may communicate over the mesh, but not use this context).
  template <class Make>
  [[nodiscard]] std::shared_ptr<mesh_context> submesh(axis_set axes, Make&& make) {
    std::lock_guard lock(mutex_);
    auto it = submeshes_.find(axes.bits);
    if (it == submeshes_.end()) it = submeshes_.emplace(axes.bits, make()).first;
    return it->second;
  }

  // Collective: a new communicator of this rank's group on `axes`, counting
  // into this mesh's counters.
  [[nodiscard]] communicator split(axis_set axes) const {
    return comm_.split(static_cast<int>(group_index(shape_, axes, rank())),
                       static_cast<int>(group_position(shape_, axes, rank())));
  }

  // The State attached to this mesh, made as State(*this) on first use (its
  // constructor must not call back into this context's maps) and dropped
  // before Kokkos finalizes (it may hold Views).
  template <class State>
  [[nodiscard]] State& state() {
    std::lock_guard lock(mutex_);
    auto& slot = states_[std::type_index(typeid(State))];
    if (!slot) {
      if (states_.size() == 1) {
        std::weak_ptr<mesh_context> const self = weak_from_this();
        Kokkos::push_finalize_hook([self] {
          if (auto const context = self.lock()) context->drop_states();
        });
      }
      slot = std::make_shared<State>(*this);
    }
    return *std::static_pointer_cast<State>(slot);
  }

 private:
  void drop_states() {
    std::lock_guard lock(mutex_);
    states_.clear();
  }

  communicator comm_;
  mesh_shape shape_;
  mesh_coordinates coordinates_{};
  std::shared_ptr<memory_ledger> ledger_;
  plan_cache plans_;
  std::mutex mutex_;  // guards the maps below
  std::map<unsigned, communicator> groups_;
  std::map<unsigned, std::shared_ptr<mesh_context>> submeshes_;
  std::map<std::type_index, std::shared_ptr<void>> states_;
};

}  // namespace shardmesh::detail
