#include <shardmesh/shardmesh.hpp>

using namespace shardmesh;

auto f(dtensor<float, layout{shard("tp"), replicated}> const& x) {
  return redistribute<layout{replicated, replicated}.partial(reduce_op::sum, "tp")>(x);
}
