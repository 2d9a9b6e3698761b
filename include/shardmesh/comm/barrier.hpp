#pragma once
// A barrier over a communicator: every rank waits for the others (counted
// as a call that moves no bytes).

#include "shardmesh/comm/collective_debug.hpp"
#include "shardmesh/comm/communicator.hpp"

#include <mpi.h>

namespace shardmesh {

inline void barrier(communicator const& comm) {
  detail::check_collective(comm.get(), "barrier", "");
  comm.counters().record("barrier", 0, 0);
  detail::blocked_in const waiting("barrier");
  MPI_Barrier(comm.get());
}

}  // namespace shardmesh
