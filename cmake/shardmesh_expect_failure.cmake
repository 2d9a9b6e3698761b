# cmake -DPATTERN=<regex> -DTIMEOUT=<s> -P shardmesh_expect_failure.cmake -- COMMAND...
# Succeeds when COMMAND finishes within TIMEOUT seconds with a non-zero exit
# status and output (stdout and stderr) matching PATTERN.
include(${CMAKE_CURRENT_LIST_DIR}/shardmesh_command_after_dashes.cmake)
if(NOT command)
  message(FATAL_ERROR "expect_failure: no command after --")
endif()

# A hung MPI job is stopped with SIGTERM first, so that its launcher can
# take its ranks down with it (a killed launcher leaves them spinning).
find_program(timeout_program timeout)
if(timeout_program)
  list(PREPEND command ${timeout_program} --kill-after=10 ${TIMEOUT})
endif()
math(EXPR backstop "${TIMEOUT} + 20")
execute_process(COMMAND ${command} TIMEOUT ${backstop}
                RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")
if(status MATCHES "timeout|Process terminated due to timeout" OR (timeout_program AND status EQUAL 124))
  message(FATAL_ERROR "expect_failure: the command hung: no result after ${TIMEOUT} s")
elseif(status EQUAL 0)
  message(FATAL_ERROR "expect_failure: the command succeeded but was expected to fail")
elseif(NOT output MATCHES "${PATTERN}")
  message(FATAL_ERROR "expect_failure: the command failed (${status}) without output matching: ${PATTERN}")
endif()
message(STATUS "expect_failure: failed as expected (${status}), output matches ${PATTERN}")
