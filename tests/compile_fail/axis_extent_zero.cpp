#include <shardmesh/algebra/axis.hpp>

shardmesh::axis<"dp", 0> bad;
