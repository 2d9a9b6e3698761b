#pragma once
// What shardmesh runs on: its version, the Kokkos backend and concurrency, and
// the MPI library. Printed by examples and benchmarks so that every figure
// names the machine it came from.

#include "shardmesh/version.hpp"

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <string>

namespace shardmesh {

struct runtime_info {
  std::string shardmesh_version;
  std::string kokkos_version;
  std::string execution_space;  // Kokkos::DefaultExecutionSpace, e.g. "OpenMP"
  int concurrency = 0;          // of the default execution space on this rank
  std::string mpi_library;      // first line of MPI_Get_library_version
  int mpi_version = 0;
  int mpi_subversion = 0;
  int mpi_thread_level = 0;  // what MPI_Query_thread reports
};

// Precondition: Kokkos and MPI are initialised.
inline runtime_info query_runtime_info() {
  runtime_info info;
  info.shardmesh_version = std::string(version);
  info.kokkos_version = std::to_string(KOKKOS_VERSION / 10000) + "." + std::to_string(KOKKOS_VERSION / 100 % 100) +
                        "." + std::to_string(KOKKOS_VERSION % 100);
  info.execution_space = Kokkos::DefaultExecutionSpace::name();
  info.concurrency = Kokkos::DefaultExecutionSpace().concurrency();
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(library, &length);
  info.mpi_library.assign(library, static_cast<std::size_t>(length));
  info.mpi_library = info.mpi_library.substr(0, info.mpi_library.find_first_of("\r\n,"));
  MPI_Get_version(&info.mpi_version, &info.mpi_subversion);
  MPI_Query_thread(&info.mpi_thread_level);
  return info;
}

inline std::string to_string(runtime_info const& info) {
  return "shardmesh " + info.shardmesh_version + ", Kokkos " + info.kokkos_version + " (" + info.execution_space +
         ", concurrency " + std::to_string(info.concurrency) + "), " + info.mpi_library + " (MPI " +
         std::to_string(info.mpi_version) + "." + std::to_string(info.mpi_subversion) + ")";
}

}  // namespace shardmesh
