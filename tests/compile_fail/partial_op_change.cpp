#include <shardmesh/algebra/validation.hpp>

using namespace shardmesh;

constexpr mesh_shape mesh{{"dp", 2}, {"tp", 2}};
static_assert(check_transition<mesh, layout{replicated}.partial(reduce_op::sum, "tp"),
                               layout{replicated}.partial(reduce_op::max, "tp")>());
