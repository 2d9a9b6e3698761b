#pragma once
// Helpers for tests that run on several MPI ranks.

#include <mpi.h>

namespace shardmesh::test {

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

}  // namespace shardmesh::test
