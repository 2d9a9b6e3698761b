#include <shardmesh/algebra/axis.hpp>

shardmesh::axis<"data parallel", 2> bad;
