#include <shardmesh/algebra/validation.hpp>

#include <complex>

using namespace shardmesh;

constexpr mesh_shape mesh{{"dp", 2}, {"tp", 2}};
static_assert(check_layout<mesh, layout{replicated}.partial(reduce_op::max, "tp"), std::complex<float>>());
