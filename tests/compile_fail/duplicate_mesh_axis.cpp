#include <shardmesh/algebra/validation.hpp>

using namespace shardmesh;

constexpr mesh_shape mesh{{"dp", 2}, {"dp", 2}};
static_assert(check_layout<mesh, layout{shard("dp")}>());
