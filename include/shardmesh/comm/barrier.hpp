#pragma once
// A barrier over a communicator: every rank waits for the others (counted
// as a call that moves no bytes).

#include "shardmesh/comm/communicator.hpp"

#include <mpi.h>

namespace shardmesh {

inline void barrier(communicator const& comm) {
  comm.counters().record("barrier", 0, 0);
  MPI_Barrier(comm.get());
}

}  // namespace shardmesh
