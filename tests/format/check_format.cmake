# cmake -DCLANG_FORMAT=<program> -DSOURCE_DIR=<repository> -P check_format.cmake
# Fails listing every C++ file under include/, tests/, bench/, examples/ and tools/
# that clang-format would change; prints SKIP: without clang-format 19.
if(NOT CLANG_FORMAT)
  message("SKIP: clang-format 19 not found")
  return()
endif()
execute_process(COMMAND ${CLANG_FORMAT} --version OUTPUT_VARIABLE version)
if(NOT version MATCHES "version 19\\.")
  message("SKIP: ${CLANG_FORMAT} is not clang-format 19 (${version})")
  return()
endif()
file(GLOB_RECURSE files ${SOURCE_DIR}/include/*.hpp ${SOURCE_DIR}/tests/*.hpp ${SOURCE_DIR}/tests/*.cpp
     ${SOURCE_DIR}/bench/*.hpp ${SOURCE_DIR}/bench/*.cpp ${SOURCE_DIR}/examples/*.cpp ${SOURCE_DIR}/tools/*.hpp
     ${SOURCE_DIR}/tools/*.cpp)
set(unformatted "")
foreach(file IN LISTS files)
  execute_process(COMMAND ${CLANG_FORMAT} --style=file:${SOURCE_DIR}/.clang-format --dry-run --Werror ${file}
                  RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET)
  if(NOT status EQUAL 0)
    file(RELATIVE_PATH relative ${SOURCE_DIR} ${file})
    list(APPEND unformatted ${relative})
  endif()
endforeach()
list(LENGTH files checked)
if(unformatted)
  list(JOIN unformatted "\n  " listing)
  message(FATAL_ERROR "not formatted by .clang-format (run clang-format-19 -i on them):\n  ${listing}")
endif()
message(STATUS "all ${checked} C++ files follow .clang-format")
