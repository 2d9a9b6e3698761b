#pragma once
// Memory for the shards of op results, reused. Every op returns a new
// dtensor, and a training step makes the same results, of the same shapes,
// every step: allocating each anew costs an allocation and, on the host,
// page faults on first touch, and on a GPU a device-wide fence (Kokkos
// fences before it frees). So each mesh keeps, per View type, every View it
// handed out for an op result; one that nothing references any more (its
// use_count() is 1, the pool's own: every copy, subview and dtensor holding
// it counts) is handed out again for the same extents. Their Kokkos label
// is "shardmesh::op_result": a View serves many ops in turn.
//
// What the pool holds idle is bounded by the most it had in use at once:
// when an allocation finds no idle View to reuse and the idle bytes exceed
// that peak, the idle Views used longest ago are freed first. (Bounding by
// what is in use at that moment would free, between a step's forward and
// backward, what the next step needs again.) ops::cached_result_bytes
// reports what the pool holds, ops::release_cached_results frees every idle
// View and starts the peak again. The mesh's memory ledger counts what the
// pool holds as workspace (transient results, and the Views kept for
// reuse), except the Views a trainer keeps between actions for the backward
// of micro-batches in flight: it names them (classify) and they count as
// activations. A result taken over for good (a parameter's gradient) leaves
// the pool through take_result().

#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"
#include "shardmesh/runtime/mesh_context.hpp"
#include "shardmesh/tensor/dtensor.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace shardmesh::ops::detail {

// The pools of one mesh, one per View type, as one mesh state: so that
// release_idle() reaches every one.
class result_pools {
 public:
  explicit result_pools(shardmesh::detail::mesh_context const& context) : ledger_(context.ledger()) {}

  struct pool_base {
    virtual ~pool_base() = default;
    virtual void release_idle() = 0;
    [[nodiscard]] virtual std::size_t idle_bytes() const = 0;
    [[nodiscard]] virtual std::size_t held_bytes() const = 0;
    virtual void classify(std::span<void const* const> kept) = 0;
  };

  template <class View>
  class pool final : public pool_base {
   public:
    explicit pool(std::shared_ptr<memory_ledger> ledger) : ledger_(std::move(ledger)) {}

    // A View of these extents, uninitialised: an idle one if there is one,
    // else a new one.
    View get(tensor_index const& extents) {
      std::lock_guard lock(mutex_);
      ++clock_;
      std::size_t in_use = 0;
      entry* found = nullptr;
      for (entry& e : held_) {
        if (e.view.use_count() > 1)
          in_use += bytes_of(e.view);
        else if (found == nullptr && extents_match(e.view, extents))
          found = &e;
      }
      if (found != nullptr) {
        // The last kernels that used it may still run on another instance.
        Kokkos::fence("shardmesh::result_pool: reuse");
        found->last_use = clock_;
        peak_in_use_ = std::max(peak_in_use_, in_use + bytes_of(found->view));
        return found->view;
      }
      View v = shardmesh::detail::allocate<View>("shardmesh::op_result", extents);
      peak_in_use_ = std::max(peak_in_use_, in_use + bytes_of(v));
      trim();
      held_.push_back({v, clock_, ledger_entry(ledger_, memory_category::workspace, bytes_of(v))});
      return v;
    }

    // Stops holding v's memory (a no-op if the pool did not make v): its
    // holder keeps it, and records it in the ledger itself.
    void take(View const& v) {
      std::lock_guard lock(mutex_);
      std::erase_if(held_, [&](entry const& e) { return e.view.data() == v.data() && v.data() != nullptr; });
    }

    void release_idle() override {
      std::lock_guard lock(mutex_);
      std::erase_if(held_, [](entry const& e) { return e.view.use_count() == 1; });
      peak_in_use_ = bytes(false);
    }
    [[nodiscard]] std::size_t idle_bytes() const override {
      std::lock_guard lock(mutex_);
      return bytes(true);
    }
    [[nodiscard]] std::size_t held_bytes() const override {
      std::lock_guard lock(mutex_);
      return bytes(true) + bytes(false);
    }
    // Records the Views whose data `kept` (sorted) names as activations, every other as workspace.
    void classify(std::span<void const* const> kept) override {
      std::lock_guard lock(mutex_);
      for (entry& e : held_) {
        bool const is_kept = std::binary_search(kept.begin(), kept.end(), static_cast<void const*>(e.view.data()));
        memory_category const want = is_kept ? memory_category::activations : memory_category::workspace;
        if (e.recorded.category() == want) continue;
        e.recorded = {};  // released first: the total never counts the View twice
        e.recorded = ledger_entry(ledger_, want, bytes_of(e.view));
      }
    }

   private:
    struct entry {
      View view;
      std::uint64_t last_use;
      ledger_entry recorded;  // workspace, or activations while a trainer keeps the View
    };

    static std::size_t bytes_of(View const& v) { return v.span() * sizeof(typename View::value_type); }

    static bool extents_match(View const& v, tensor_index const& extents) {
      for (std::size_t d = 0; d < View::rank(); ++d)
        if (v.extent(d) != extents[d]) return false;
      return true;
    }

    [[nodiscard]] std::size_t bytes(bool idle) const {
      std::size_t total = 0;
      for (entry const& e : held_)
        if ((e.view.use_count() == 1) == idle) total += bytes_of(e.view);
      return total;
    }

    // Frees the idle Views used longest ago until idle bytes <= the peak in use.
    void trim() {
      std::size_t idle = bytes(true);
      while (idle > peak_in_use_) {
        auto oldest = held_.end();
        for (auto it = held_.begin(); it != held_.end(); ++it)
          if (it->view.use_count() == 1 && (oldest == held_.end() || it->last_use < oldest->last_use)) oldest = it;
        idle -= bytes_of(oldest->view);
        held_.erase(oldest);
      }
    }

    std::shared_ptr<memory_ledger> ledger_;
    mutable std::mutex mutex_;
    std::vector<entry> held_;
    std::uint64_t clock_ = 0;  // counts get() calls: when each View was last handed out
    std::size_t peak_in_use_ = 0;
  };

  template <class View>
  pool<View>& of() {
    std::lock_guard lock(mutex_);
    for (auto const& p : pools_)
      if (auto* typed = dynamic_cast<pool<View>*>(p.get())) return *typed;
    pools_.push_back(std::make_unique<pool<View>>(ledger_));
    return static_cast<pool<View>&>(*pools_.back());
  }

  void release_idle() {
    std::lock_guard lock(mutex_);
    for (auto const& p : pools_) p->release_idle();
  }
  // The Views whose data `kept` names (in any order) count as activations from now on, every other as workspace.
  void classify(std::vector<void const*> kept) {
    std::ranges::sort(kept);
    std::lock_guard lock(mutex_);
    for (auto const& p : pools_) p->classify(kept);
  }
  [[nodiscard]] std::size_t idle_bytes() const {
    std::lock_guard lock(mutex_);
    std::size_t total = 0;
    for (auto const& p : pools_) total += p->idle_bytes();
    return total;
  }
  [[nodiscard]] std::size_t held_bytes() const {
    std::lock_guard lock(mutex_);
    std::size_t total = 0;
    for (auto const& p : pools_) total += p->held_bytes();
    return total;
  }

 private:
  std::shared_ptr<memory_ledger> ledger_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<pool_base>> pools_;
};

}  // namespace shardmesh::ops::detail

namespace shardmesh::ops {

// Bytes of op results the mesh holds on this rank: all of them, and those
// nothing references any more, kept for reuse.
struct cached_results {
  std::size_t held = 0;
  std::size_t idle = 0;
};

[[nodiscard]] inline cached_results cached_result_bytes(device_mesh const& mesh) {
  auto const& pools = mesh.state<detail::result_pools>();
  return {pools.held_bytes(), pools.idle_bytes()};
}

// Frees the op results kept for reuse that nothing references (not collective).
inline void release_cached_results(device_mesh const& mesh) { mesh.state<detail::result_pools>().release_idle(); }

namespace detail {

// Takes x's shard out of the mesh's result pool, if it came from there: its
// memory is then the caller's alone, never handed out again, and no longer
// counted in the ledger.
template <class T, std::size_t Rank, class MemorySpace>
void take_result(dynamic_dtensor<T, Rank, MemorySpace> const& x) {
  using view = typename dynamic_dtensor<T, Rank, MemorySpace>::view_type;
  x.mesh().template state<result_pools>().template of<view>().take(x.local());
}

}  // namespace detail

}  // namespace shardmesh::ops
