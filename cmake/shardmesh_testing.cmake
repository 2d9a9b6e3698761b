# Test registration helpers: MPI tests at several rank counts, compile-fail
# tests, and tests that expect a command to fail with a given message.

set(SHARDMESH_TEST_RANKS 1 2 4 8 CACHE STRING "Default MPI rank counts for shardmesh's tests")
set(SHARDMESH_TEST_TIMEOUT 300 CACHE STRING "Default timeout in seconds of one MPI test run")
# Every timeout is multiplied by this: sanitized debug builds run the same
# tests several times slower (the debug-asan preset sets 4).
set(SHARDMESH_TEST_TIMEOUT_SCALE 1 CACHE STRING "Factor applied to every test's timeout")

# Open MPI refuses to start more ranks than cores unless told; MPICH rejects
# the flag. Set it through MPIEXEC_PREFLAGS, once, only for Open MPI, and
# only if the user left MPIEXEC_PREFLAGS empty.
if(NOT MPIEXEC_PREFLAGS AND NOT SHARDMESH_MPIEXEC_PREFLAGS_CHECKED)
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version
                  OUTPUT_VARIABLE _launcher ERROR_VARIABLE _launcher)
  if(_launcher MATCHES "Open MPI|OpenRTE|open-mpi")
    set_property(CACHE MPIEXEC_PREFLAGS PROPERTY VALUE "--oversubscribe")
  endif()
  set(SHARDMESH_MPIEXEC_PREFLAGS_CHECKED ON CACHE INTERNAL "")
endif()
separate_arguments(_shardmesh_mpiexec_preflags UNIX_COMMAND "${MPIEXEC_PREFLAGS}")
separate_arguments(_shardmesh_mpiexec_postflags UNIX_COMMAND "${MPIEXEC_POSTFLAGS}")

cmake_host_system_information(RESULT _shardmesh_cores QUERY NUMBER_OF_LOGICAL_CORES)
if(_shardmesh_cores LESS 1)
  set(_shardmesh_cores 1)
endif()

set(SHARDMESH_EXPECT_FAILURE_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/shardmesh_expect_failure.cmake)
set(SHARDMESH_ISOLATED_LAUNCH ${CMAKE_CURRENT_LIST_DIR}/shardmesh_isolated_launch.sh)

# The mpiexec command line that starts EXECUTABLE on RANKS ranks, each launch
# in a temporary directory of its own (see shardmesh_isolated_launch.sh).
function(shardmesh_mpiexec_command out ranks executable)
  set(${out} ${SHARDMESH_ISOLATED_LAUNCH} ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ranks} ${_shardmesh_mpiexec_preflags}
      ${executable} ${_shardmesh_mpiexec_postflags} ${ARGN} PARENT_SCOPE)
endfunction()

# Environment for a test on RANKS ranks: OpenMP threads share the cores.
# Kokkos's start-up warnings (one set per rank) are off: the launcher may
# splice them into rank 0's messages, which tests match.
function(shardmesh_mpi_environment out ranks)
  math(EXPR threads "${_shardmesh_cores} / ${ranks}")
  if(threads LESS 1)
    set(threads 1)
  endif()
  set(${out} OMP_NUM_THREADS=${threads} OMP_PROC_BIND=false KOKKOS_DISABLE_WARNINGS=1 PARENT_SCOPE)
endfunction()

# shardmesh_add_mpi_test(NAME <name> TARGET <target> [RANKS n...] [TIMEOUT s] [ARGS ...])
# Registers <name>.np<n> for each rank count, run through MPIEXEC_*.
function(shardmesh_add_mpi_test)
  cmake_parse_arguments(arg "" "NAME;TARGET;TIMEOUT" "RANKS;ARGS;LABELS" ${ARGN})
  if(NOT arg_RANKS)
    set(arg_RANKS ${SHARDMESH_TEST_RANKS})
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT ${SHARDMESH_TEST_TIMEOUT})
  endif()
  foreach(ranks IN LISTS arg_RANKS)
    shardmesh_mpiexec_command(command ${ranks} $<TARGET_FILE:${arg_TARGET}> ${arg_ARGS})
    shardmesh_mpi_environment(environment ${ranks})
    add_test(NAME ${arg_NAME}.np${ranks} COMMAND ${command})
    # Runs on more than 4 ranks belong to the full suite (tools/test full), not the default one.
    set(labels mpi ${arg_LABELS})
    if(ranks GREATER 4)
      list(APPEND labels full)
    endif()
    set_tests_properties(${arg_NAME}.np${ranks} PROPERTIES
      TIMEOUT ${arg_TIMEOUT} PROCESSORS ${ranks} ENVIRONMENT "${environment}" LABELS "${labels}")
  endforeach()
endfunction()

# shardmesh_add_expected_failure_test(NAME <name> PATTERN <regex> [TIMEOUT s] COMMAND ...)
# Passes when COMMAND exits non-zero within TIMEOUT and its output matches PATTERN.
function(shardmesh_add_expected_failure_test)
  cmake_parse_arguments(arg "" "NAME;PATTERN;TIMEOUT" "COMMAND;ENVIRONMENT" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  math(EXPR arg_TIMEOUT "${arg_TIMEOUT} * ${SHARDMESH_TEST_TIMEOUT_SCALE}")
  add_test(NAME ${arg_NAME}
    COMMAND ${CMAKE_COMMAND} "-DPATTERN=${arg_PATTERN}" -DTIMEOUT=${arg_TIMEOUT}
            -P ${SHARDMESH_EXPECT_FAILURE_SCRIPT} -- ${arg_COMMAND})
  # The script enforces TIMEOUT itself; ctest's is a backstop (scaled again
  # by shardmesh_scale_test_timeouts, which only lengthens it).
  math(EXPR backstop "${arg_TIMEOUT} + 30")
  set_tests_properties(${arg_NAME} PROPERTIES TIMEOUT ${backstop} ENVIRONMENT "${arg_ENVIRONMENT}")
endfunction()

# shardmesh_add_failing_run_tests(NAME <prefix> TARGET <target> RANKS n... TAGS tag... PATTERN <regex>)
# For each rank count and Catch2 tag, <prefix>.<tag>.np<n>: TARGET runs the
# test cases of [tag] on n ranks and must make the whole run fail within 60 s
# with output matching PATTERN, in which <ranks> stands for n and <last> for
# the last rank.
function(shardmesh_add_failing_run_tests)
  cmake_parse_arguments(arg "" "NAME;TARGET;PATTERN" "RANKS;TAGS" ${ARGN})
  foreach(ranks IN LISTS arg_RANKS)
    math(EXPR last "${ranks} - 1")
    string(REPLACE "<ranks>" "${ranks}" pattern "${arg_PATTERN}")
    string(REPLACE "<last>" "${last}" pattern "${pattern}")
    shardmesh_mpi_environment(environment ${ranks})
    foreach(tag IN LISTS arg_TAGS)
      shardmesh_mpiexec_command(command ${ranks} $<TARGET_FILE:${arg_TARGET}> "[${tag}]")
      shardmesh_add_expected_failure_test(NAME ${arg_NAME}.${tag}.np${ranks} TIMEOUT 60 PATTERN "${pattern}"
        ENVIRONMENT "${environment}" COMMAND ${command})
      set_tests_properties(${arg_NAME}.${tag}.np${ranks} PROPERTIES PROCESSORS ${ranks})
    endforeach()
  endforeach()
endfunction()

# shardmesh_add_compile_fail_test(NAME <name> SOURCE <file> PATTERN <regex>)
# Passes when SOURCE fails to compile with a diagnostic matching PATTERN.
function(shardmesh_add_compile_fail_test)
  cmake_parse_arguments(arg "" "NAME;SOURCE;PATTERN" "" ${ARGN})
  set(target compile_fail_${arg_NAME})
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${arg_SOURCE})
  target_link_libraries(${target} PRIVATE shardmesh::shardmesh)
  set(pattern "${arg_PATTERN}")
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # Clang abbreviates a long template argument in its diagnostics ("layout:
    # dimension 1 is sharded on [...]"): match the start it shows, up to the
    # first quoted name. GCC builds check the whole message.
    string(REGEX MATCH "^[^.\"]*" pattern "${pattern}")
    string(SUBSTRING "${pattern}" 0 30 pattern)
  endif()
  shardmesh_add_expected_failure_test(NAME compile_fail.${arg_NAME} PATTERN "${pattern}" TIMEOUT 300
    COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${target} --config $<CONFIG>)
  # Builds in the shared build tree must not run concurrently.
  set_tests_properties(compile_fail.${arg_NAME} PROPERTIES RESOURCE_LOCK shardmesh_build_tree LABELS compile_fail)
endfunction()

# shardmesh_add_compile_test(NAME <test> TARGET <target> SOURCES ... [LIBRARY <lib>] [FULL])
# Sources that pass when they compile (their checks are static_asserts): an
# object library built with everything else (against LIBRARY, by default
# shardmesh::shardmesh), and a test that rebuilds it so that ctest reports it.
# FULL: only the full suite's test builds it (label full, not in `all`).
function(shardmesh_add_compile_test)
  cmake_parse_arguments(arg "FULL" "NAME;TARGET;LIBRARY" "SOURCES" ${ARGN})
  if(NOT arg_LIBRARY)
    set(arg_LIBRARY shardmesh::shardmesh)
  endif()
  set(exclude "")
  if(arg_FULL)
    set(exclude EXCLUDE_FROM_ALL)
  endif()
  add_library(${arg_TARGET} OBJECT ${exclude} ${arg_SOURCES})
  target_link_libraries(${arg_TARGET} PRIVATE ${arg_LIBRARY})
  shardmesh_target_warnings(${arg_TARGET})
  add_test(NAME ${arg_NAME} COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${arg_TARGET} --config $<CONFIG>)
  set_tests_properties(${arg_NAME} PROPERTIES RESOURCE_LOCK shardmesh_build_tree TIMEOUT 600)
  if(arg_FULL)
    set_tests_properties(${arg_NAME} PROPERTIES LABELS full)
  endif()
endfunction()

# shardmesh_scale_test_timeouts(<dir>): multiplies the TIMEOUT of every test
# registered in <dir> and below by SHARDMESH_TEST_TIMEOUT_SCALE. Called once,
# after every test is added.
function(shardmesh_scale_test_timeouts dir)
  if(SHARDMESH_TEST_TIMEOUT_SCALE EQUAL 1)
    return()
  endif()
  if(CMAKE_VERSION VERSION_LESS 3.28)
    message(FATAL_ERROR "SHARDMESH_TEST_TIMEOUT_SCALE needs CMake 3.28 or newer (set_tests_properties DIRECTORY)")
  endif()
  get_property(tests DIRECTORY ${dir} PROPERTY TESTS)
  foreach(test IN LISTS tests)
    get_test_property(${test} TIMEOUT DIRECTORY ${dir} timeout)
    if(NOT timeout)
      set(timeout 1500)  # ctest's default
    endif()
    math(EXPR timeout "${timeout} * ${SHARDMESH_TEST_TIMEOUT_SCALE}")
    set_tests_properties(${test} DIRECTORY ${dir} PROPERTIES TIMEOUT ${timeout})
  endforeach()
  get_property(subdirectories DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    shardmesh_scale_test_timeouts(${subdirectory})
  endforeach()
endfunction()
