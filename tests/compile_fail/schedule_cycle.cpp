#include <shardmesh/strategy/pipeline_simulation.hpp>

using namespace shardmesh::parallel;
using namespace shardmesh::parallel::actions;

// Stage 0 waits for micro-batch 0's gradient before sending the activation
// stage 1 needs to make it: each waits for the other.
static_assert(check_schedule<[] {
  pipeline_schedule s("hand", 2, 1, 1, 1);
  s.actions[0] = {forward(0), receive_gradient(0), send_activation(0), backward(0)};
  s.actions[1] = {receive_activation(0), forward(0), backward(0), send_gradient(0)};
  return s;
}>());
