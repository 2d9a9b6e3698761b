# cmake -DPATTERN=<regex> [-DREPORT=<file>] -P expect_output.cmake -- COMMAND...
# Succeeds when COMMAND exits 0 and its output (stdout and stderr, or the
# file REPORT when given) matches PATTERN, in which "." also matches a line
# break. A program on MPI ranks writes its report to a file: the launcher
# that forwards the ranks' stdout and stderr may interleave the two.
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/shardmesh_command_after_dashes.cmake)
if(DEFINED REPORT)
  file(REMOVE "${REPORT}")
endif()
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")
if(DEFINED REPORT AND status EQUAL 0)
  file(READ "${REPORT}" output)
  message("${REPORT}:\n${output}")
endif()
if(NOT status EQUAL 0)
  message(FATAL_ERROR "expect_output: the command failed (${status})")
elseif(NOT output MATCHES "${PATTERN}")
  message(FATAL_ERROR "expect_output: the output does not match: ${PATTERN}")
endif()
