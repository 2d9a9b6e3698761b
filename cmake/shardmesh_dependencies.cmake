# shardmesh's dependencies: Kokkos >= 4.5 (unless the including project
# already builds Kokkos in-tree), MPI for C++, a BLAS (local products on
# host memory; Debian's OpenBLAS), cuBLAS on a CUDA build, optionally oneDNN (bf16 local products on
# host memory, where found: SHARDMESH_USES_ONEDNN; Debian's libdnnl-dev) and, for checkpoints (shardmesh::io, unless
# SHARDMESH_ENABLE_IO is off), HDF5 built with MPI. Used by the build, by tools/host-probe and,
# through cmake/shardmeshConfig.cmake.in, by the installed package.
if(NOT TARGET Kokkos::kokkos)
  find_package(Kokkos 4.5 REQUIRED)
endif()
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(BLAS REQUIRED)
# cuBLAS for local products on device memory, on a CUDA build of Kokkos (ops/detail/cublas.hpp),
# and NCCL, where found, for collectives on device memory (comm/nccl.hpp). On a HIP build, hipBLAS
# (ops/detail/hipblas.hpp) and RCCL (comm/nccl.hpp), each where found: ROCm's CMake packages.
if(Kokkos_ENABLE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  include(${CMAKE_CURRENT_LIST_DIR}/shardmesh_find_nccl.cmake)
endif()
set(SHARDMESH_USES_HIPBLAS OFF)
set(SHARDMESH_USES_RCCL OFF)
if(Kokkos_ENABLE_HIP)
  find_package(hipblas CONFIG QUIET)
  find_package(rccl CONFIG QUIET)
  set(SHARDMESH_USES_HIPBLAS ${hipblas_FOUND})
  set(SHARDMESH_USES_RCCL ${rccl_FOUND})
endif()
if(NOT DEFINED SHARDMESH_USES_ONEDNN)  # the installed package says how it was built
  set(SHARDMESH_USES_ONEDNN OFF)
  if(SHARDMESH_ENABLE_ONEDNN)
    find_package(dnnl CONFIG QUIET)
    set(SHARDMESH_USES_ONEDNN ${dnnl_FOUND})
  endif()
elseif(SHARDMESH_USES_ONEDNN)
  find_package(dnnl CONFIG REQUIRED)
endif()
if(SHARDMESH_ENABLE_IO)
  set(HDF5_PREFER_PARALLEL TRUE)
  find_package(HDF5 REQUIRED COMPONENTS C)
  if(NOT HDF5_IS_PARALLEL)
    message(FATAL_ERROR "shardmesh::io needs HDF5 built with MPI (Debian: libhdf5-openmpi-dev); "
                        "the HDF5 found is serial. Configure with -DSHARDMESH_ENABLE_IO=OFF to build without checkpoints.")
  endif()
endif()
