#include <shardmesh/algebra/propagation.hpp>

#include <array>
#include <cstddef>

using namespace shardmesh;

constexpr mesh_shape mesh{{"tp", 2}};
constexpr auto y =
    static_product<mesh, "btc,cf->btf", layout{replicated, replicated, replicated}, layout{replicated, shard("tp")},
                   std::array<std::size_t, 3>{2, 8, 16}, std::array<std::size_t, 2>{12, 64}>();
