#include <shardmesh/strategy/batch.hpp>

// 30 samples cannot be 4 per replica, 2 micro-steps, 4 replicas.
static_assert(shardmesh::parallel::check_batch<30, 4, 2, 4>());
