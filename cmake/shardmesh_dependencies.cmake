# shardmesh's dependencies: Kokkos >= 4.5 (unless the including project
# already builds Kokkos in-tree) and MPI for C++. Used by the build, by the
# installed package config and by tools/host-probe.
if(NOT TARGET Kokkos::kokkos)
  find_package(Kokkos 4.5 REQUIRED)
endif()
find_package(MPI REQUIRED COMPONENTS CXX)
