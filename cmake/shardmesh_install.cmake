# Install the headers and an exported package, so that another project can
#   find_package(shardmesh 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE shardmesh::shardmesh)   # or shardmesh::algebra alone
#   target_link_libraries(app PRIVATE shardmesh::io)          # checkpoints, when built with them
include(CMakePackageConfigHelpers)

set(SHARDMESH_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/shardmesh)

install(DIRECTORY include/shardmesh TYPE INCLUDE)
install(TARGETS shardmesh shardmesh_algebra EXPORT shardmesh_targets)
install(EXPORT shardmesh_targets
  NAMESPACE shardmesh::
  FILE shardmeshTargets.cmake
  DESTINATION ${SHARDMESH_INSTALL_CMAKEDIR})

# Checkpoints in their own export set: a package built without them has none.
if(SHARDMESH_ENABLE_IO)
  install(TARGETS shardmesh_io EXPORT shardmesh_io_targets)
  install(EXPORT shardmesh_io_targets
    NAMESPACE shardmesh::
    FILE shardmeshIoTargets.cmake
    DESTINATION ${SHARDMESH_INSTALL_CMAKEDIR})
endif()

configure_package_config_file(cmake/shardmeshConfig.cmake.in
  ${PROJECT_BINARY_DIR}/shardmeshConfig.cmake
  INSTALL_DESTINATION ${SHARDMESH_INSTALL_CMAKEDIR})
# 0.x releases may break between minor versions.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/shardmeshConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES
  ${PROJECT_BINARY_DIR}/shardmeshConfig.cmake
  ${PROJECT_BINARY_DIR}/shardmeshConfigVersion.cmake
  cmake/shardmesh_find_nccl.cmake
  DESTINATION ${SHARDMESH_INSTALL_CMAKEDIR})
