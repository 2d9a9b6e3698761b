#include <shardmesh/strategy/pipeline_simulation.hpp>

using namespace shardmesh::parallel;
using namespace shardmesh::parallel::actions;

// The last stage runs micro-batch 0's backward before its forward.
static_assert(check_schedule<[] {
  pipeline_schedule s("hand", 2, 1, 1, 1);
  s.actions[0] = {forward(0), send_activation(0), receive_gradient(0), backward(0)};
  s.actions[1] = {receive_activation(0), backward(0), forward(0), send_gradient(0)};
  return s;
}>());
