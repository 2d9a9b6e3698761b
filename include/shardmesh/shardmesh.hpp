#pragma once
// shardmesh: distributed tensors on a logical device mesh. Include this header
// for everything, or the headers of the parts you use.

#include "shardmesh/runtime_info.hpp"
#include "shardmesh/version.hpp"

#include "shardmesh/algebra/axis_groups.hpp"
#include "shardmesh/algebra/axis_set.hpp"
#include "shardmesh/algebra/layout.hpp"
#include "shardmesh/algebra/mesh_shape.hpp"
#include "shardmesh/algebra/plan_cache.hpp"
#include "shardmesh/algebra/plan_step.hpp"
#include "shardmesh/algebra/plan_traffic.hpp"
#include "shardmesh/algebra/planner.hpp"
#include "shardmesh/algebra/shard_geometry.hpp"
#include "shardmesh/algebra/static_string.hpp"
#include "shardmesh/algebra/validation.hpp"

#include "shardmesh/comm/all_gather.hpp"
#include "shardmesh/comm/all_reduce.hpp"
#include "shardmesh/comm/all_to_all.hpp"
#include "shardmesh/comm/communicator.hpp"
#include "shardmesh/comm/counters.hpp"
#include "shardmesh/comm/point_to_point.hpp"
#include "shardmesh/comm/reduce_scatter.hpp"
#include "shardmesh/errors.hpp"

#include "shardmesh/runtime/device_mesh.hpp"
#include "shardmesh/runtime/memory_ledger.hpp"
#include "shardmesh/runtime/workspace.hpp"

#include "shardmesh/tensor/distribute.hpp"
#include "shardmesh/tensor/dtensor.hpp"
#include "shardmesh/tensor/gather.hpp"
#include "shardmesh/tensor/redistribute.hpp"
#include "shardmesh/tensor/redistributor.hpp"
