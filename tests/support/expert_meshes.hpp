#pragma once
// The meshes the expert-parallel tests run on: the expert axis alone on
// every rank, and on 4 ranks beside a data-parallel axis (dp x ep).

#include "mpi_test.hpp"

#include <shardmesh/algebra/mesh_shape.hpp>

#include <cstddef>
#include <vector>

namespace shardmesh::test {

inline std::vector<mesh_shape> expert_meshes() {
  auto const n = static_cast<std::size_t>(world_size());
  std::vector<mesh_shape> all{mesh_shape{{"ep", n}}};
  if (n == 4) all.push_back(mesh_shape{{"dp", 2}, {"ep", 2}});
  return all;
}

}  // namespace shardmesh::test
