#pragma once
// shardmesh: distributed tensors on a logical device mesh. Include this header
// for everything, or the headers of the parts you use.

#include "shardmesh/version.hpp"
#include "shardmesh/runtime_info.hpp"

#include "shardmesh/algebra/axis.hpp"
#include "shardmesh/algebra/fixed_string.hpp"
