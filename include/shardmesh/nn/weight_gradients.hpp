#pragma once
// Zero-bubble pipelines split a backward pass into the input gradient (I,
// which the previous stage waits for) and the weight gradients (W, which
// nobody waits for, run later to fill idle time). Layers hand their
// weight-gradient work to weight_gradient(mesh, work): it runs at once,
// unless the mesh is deferring them, in which case it is queued with what
// it captured (the layer's saved input and the output gradient) and runs
// when the queue does.

#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/mesh_context.hpp"

#include <functional>
#include <utility>
#include <vector>

namespace shardmesh::parallel {

using weight_gradient_queue = std::vector<std::function<void()>>;

class weight_gradient_deferral {
 public:
  explicit weight_gradient_deferral(shardmesh::detail::mesh_context const&) {}

  // Queue weight gradients into `queue` from now on (nullptr: run them at once again).
  void into(weight_gradient_queue* queue) { queue_ = queue; }

  void run_or_defer(std::function<void()> work) {
    if (queue_)
      queue_->push_back(std::move(work));
    else
      work();
  }

 private:
  weight_gradient_queue* queue_ = nullptr;
};

inline void weight_gradient(device_mesh const& mesh, std::function<void()> work) {
  mesh.state<weight_gradient_deferral>().run_or_defer(std::move(work));
}

// Runs and empties a queue, in the order the work was queued.
inline void run_weight_gradients(weight_gradient_queue& queue) {
  for (auto& work : queue) work();
  queue.clear();
}

}  // namespace shardmesh::parallel
