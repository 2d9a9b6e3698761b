# Included by `cmake -P` scripts called as `cmake -D... -P script.cmake -- COMMAND...`:
# sets `command` to the list of arguments after "--".
set(command "")
set(collect OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(collect)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(collect ON)
  endif()
endforeach()
