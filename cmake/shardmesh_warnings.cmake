# Warning flags for shardmesh's own tests, benchmarks and examples; never
# put on the shardmesh::shardmesh target, whose users choose their own.
option(SHARDMESH_WARNINGS_AS_ERRORS "Treat warnings in shardmesh's own targets as errors" OFF)

function(shardmesh_target_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                           -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough)
    if(SHARDMESH_WARNINGS_AS_ERRORS)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
  endif()
endfunction()
