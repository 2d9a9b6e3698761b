#include <shardmesh/shardmesh.hpp>

using namespace shardmesh;

dtensor<double, layout{shard("dp"), shard("dp")}> x;
