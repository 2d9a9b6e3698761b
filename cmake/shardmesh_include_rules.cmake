# The direction of dependency between the library's folders, checked on
# every configure (docs/09-models.md): a header under include/shardmesh/
# that includes a folder its own may not, or a header of a pure folder that
# includes Kokkos or MPI, stops the configuration with the file, the line
# and the rule.
#
#   include(shardmesh_include_rules)
#   shardmesh_check_include_rules(<include-dir>)
#
# or as a script: cmake -DROOT=<include-dir> -P shardmesh_include_rules.cmake

if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.25)
endif()

# What each folder may include besides itself and the base every folder may
# use (errors.hpp, version.hpp, detail/). Dependencies point down only.
set(shardmesh_rule_algebra "")
set(shardmesh_rule_strategy algebra)
set(shardmesh_rule_plan algebra strategy)
set(shardmesh_rule_comm algebra)
set(shardmesh_rule_runtime algebra comm)
set(shardmesh_rule_tensor algebra comm runtime)
set(shardmesh_rule_ops algebra comm runtime tensor)
set(shardmesh_rule_nn algebra comm runtime tensor ops strategy plan)
set(shardmesh_rule_train algebra comm runtime tensor ops strategy plan nn)
set(shardmesh_rule_models algebra comm runtime tensor ops strategy nn plan)
set(shardmesh_rule_io algebra comm runtime tensor ops strategy plan nn train)
set(shardmesh_rule_folders algebra strategy plan comm runtime tensor ops nn train models io)
# Folders whose headers compile without Kokkos or MPI (against shardmesh::algebra alone).
set(shardmesh_pure_folders algebra strategy plan)

function(shardmesh_check_include_rules root)
  set(problems "")
  foreach(folder IN LISTS shardmesh_rule_folders)
    file(GLOB_RECURSE headers RELATIVE ${root} ${root}/shardmesh/${folder}/*.hpp)
    set(allowed ${folder} ${shardmesh_rule_${folder}})
    list(JOIN allowed ", " allowed_text)
    foreach(header IN LISTS headers)
      file(STRINGS ${root}/${header} lines REGEX "^[ \t]*#[ \t]*include")
      foreach(line IN LISTS lines)
        if(line MATCHES "[<\"]shardmesh/([a-z_]+)/")
          if(NOT CMAKE_MATCH_1 IN_LIST allowed AND NOT CMAKE_MATCH_1 STREQUAL "detail")
            list(APPEND problems "${header}: ${line}: ${folder}/ may include only ${allowed_text}")
          endif()
        elseif(line MATCHES "[<\"]shardmesh/([a-z_]+\\.hpp)")
          if(NOT CMAKE_MATCH_1 MATCHES "^(errors|version)\\.hpp$")
            list(APPEND problems "${header}: ${line}: only errors.hpp and version.hpp are below every folder")
          endif()
        elseif(folder IN_LIST shardmesh_pure_folders AND line MATCHES "[<\"](Kokkos|mpi\\.h|mpi\\.hpp)")
          list(APPEND problems "${header}: ${line}: ${folder}/ is pure (no Kokkos or MPI)")
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(problems)
    list(JOIN problems "\n  " text)
    message(FATAL_ERROR "shardmesh: includes against the folders' direction of dependency:\n  ${text}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED ROOT)
  shardmesh_check_include_rules(${ROOT})
endif()
