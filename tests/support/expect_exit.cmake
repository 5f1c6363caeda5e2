# Runs a command and fails when its exit code is not the expected one.
#   cmake -DEXPECT_EXIT=N -P expect_exit.cmake COMMAND [ARGS...]
# The command's output passes through, so a test's PASS_REGULAR_EXPRESSION still sees it; CTest
# ignores exit codes when a pass regex is set, so a test with one runs its command through this
# script and lists "chorus-test: exit code" in its FAIL_REGULAR_EXPRESSION (chorus_output_test in
# tests/CMakeLists.txt does both).
if(NOT DEFINED EXPECT_EXIT)
  message(FATAL_ERROR "chorus-test: exit code unchecked: EXPECT_EXIT is not set")
endif()
set(cmd)
set(after_script OFF)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_script)
    string(REPLACE ";" "\\;" arg "${CMAKE_ARGV${i}}")  # a semicolon in an argument is not a list's
    list(APPEND cmd "${arg}")
  elseif(CMAKE_ARGV${i} STREQUAL "-P")
    math(EXPR next "${i} + 1")
    set(skip ${next})
  endif()
  if(DEFINED skip AND i EQUAL skip)
    set(after_script ON)
  endif()
endforeach()
if(NOT cmd)
  message(FATAL_ERROR "chorus-test: no command given")
endif()
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc)
if(NOT rc STREQUAL EXPECT_EXIT)
  message(FATAL_ERROR "chorus-test: exit code ${rc}, expected ${EXPECT_EXIT}")
endif()
