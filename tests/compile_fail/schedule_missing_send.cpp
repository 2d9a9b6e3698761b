#include <shardmesh/strategy/pipeline_simulation.hpp>

using namespace shardmesh::parallel;
using namespace shardmesh::parallel::actions;

// Stage 0 forgets to send micro-batch 1's activation: stage 1 would wait for it forever.
static_assert(check_schedule<[] {
  pipeline_schedule s("hand", 2, 2, 1, 2);
  s.actions[0] = {forward(0),  send_activation(0),  forward(1), receive_gradient(0),
                  backward(0), receive_gradient(1), backward(1)};
  s.actions[1] = {receive_activation(0), forward(0), backward(0), send_gradient(0),
                  receive_activation(1), forward(1), backward(1), send_gradient(1)};
  return s;
}>());
