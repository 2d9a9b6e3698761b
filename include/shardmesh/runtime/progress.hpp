#pragma once
// MPI advances a non-blocking collective only inside MPI calls. Whoever has
// communication in flight on a mesh while compute goes on (the trainer's
// gradient buckets, ZeRO-3's prefetched gathers) sets a progress hook; the
// long-running ops (each local product of einsum) call progress(mesh)
// when they finish, so the communication moves between products, not only
// between layers. One hook per mesh; none set costs a lookup.

#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/mesh_context.hpp"

#include <functional>
#include <mutex>
#include <utility>

namespace shardmesh {

class progress_hook {
 public:
  explicit progress_hook(detail::mesh_context const&) {}

  // Replaces the hook (an empty function removes it).
  void set(std::function<void()> hook) {
    std::lock_guard lock(mutex_);
    hook_ = std::move(hook);
  }
  void run() {
    std::function<void()> hook;
    {
      std::lock_guard lock(mutex_);
      hook = hook_;
    }
    if (hook) hook();
  }

 private:
  std::mutex mutex_;
  std::function<void()> hook_;
};

// Runs the mesh's progress hook, if any.
inline void progress(device_mesh const& mesh) { mesh.state<progress_hook>().run(); }

}  // namespace shardmesh
