# NCCL (no CMake package of its own): the target shardmesh::nccl where
# nccl.h and libnccl are found beside the CUDA toolkit or under $NCCL_HOME.
# Included by the build (shardmesh_dependencies.cmake) and by the installed
# package's config, so that a project using it finds the same library.
find_path(SHARDMESH_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
find_library(SHARDMESH_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
if(SHARDMESH_NCCL_INCLUDE_DIR AND SHARDMESH_NCCL_LIBRARY AND NOT TARGET shardmesh::nccl)
  add_library(shardmesh::nccl UNKNOWN IMPORTED)
  set_target_properties(shardmesh::nccl PROPERTIES IMPORTED_LOCATION ${SHARDMESH_NCCL_LIBRARY}
                                                    INTERFACE_INCLUDE_DIRECTORIES ${SHARDMESH_NCCL_INCLUDE_DIR})
endif()
