#include <shardmesh/algebra/propagation.hpp>

#include <array>
#include <cstddef>

using namespace shardmesh;

constexpr mesh_shape mesh{{"tp", 2}};
constexpr auto y =
    static_elementwise<mesh, elementwise_kind::linear, layout{replicated}.partial(reduce_op::sum, "tp"),
                       layout{replicated}.partial(reduce_op::max, "tp"), std::array<std::size_t, 1>{8}>();
