# cmake -DPATTERN=<regex> -P expect_output.cmake -- COMMAND...
# Succeeds when COMMAND exits 0 and its output (stdout and stderr) matches
# PATTERN, in which "." also matches a line break.
include(${CMAKE_CURRENT_LIST_DIR}/../../cmake/shardmesh_command_after_dashes.cmake)
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "expect_output: the command failed (${status})")
elseif(NOT output MATCHES "${PATTERN}")
  message(FATAL_ERROR "expect_output: the output does not match: ${PATTERN}")
endif()
