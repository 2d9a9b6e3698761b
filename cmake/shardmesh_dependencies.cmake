# shardmesh's dependencies: Kokkos >= 4.5 (unless the including project
# already builds Kokkos in-tree), MPI for C++ and a BLAS (local products on
# host memory; Debian's OpenBLAS). Used by the build, by tools/host-probe and,
# through cmake/shardmeshConfig.cmake.in, by the installed package.
if(NOT TARGET Kokkos::kokkos)
  find_package(Kokkos 4.5 REQUIRED)
endif()
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(BLAS REQUIRED)
