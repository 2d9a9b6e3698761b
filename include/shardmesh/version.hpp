#pragma once
// shardmesh's version. CMakeLists.txt reads the three numbers from here, so
// this file is the only place a release changes them.

#include <string_view>

#define SHARDMESH_VERSION_MAJOR 0
#define SHARDMESH_VERSION_MINOR 1
#define SHARDMESH_VERSION_PATCH 0

#define SHARDMESH_DETAIL_STR(x) #x
#define SHARDMESH_DETAIL_XSTR(x) SHARDMESH_DETAIL_STR(x)
#define SHARDMESH_VERSION_STRING                 \
  SHARDMESH_DETAIL_XSTR(SHARDMESH_VERSION_MAJOR) \
  "." SHARDMESH_DETAIL_XSTR(SHARDMESH_VERSION_MINOR) "." SHARDMESH_DETAIL_XSTR(SHARDMESH_VERSION_PATCH)

namespace shardmesh {

inline constexpr std::string_view version = SHARDMESH_VERSION_STRING;

}  // namespace shardmesh
