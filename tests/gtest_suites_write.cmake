# Run after a gtest program is linked (ranzcr_gtest_suites, tests/CMakeLists.txt): lists its tests and writes
# the ctest file that registers one ctest test per gtest suite (SUITE, run as --gtest_filter=SUITE.*), and one
# per test whose full name matches ALONE (SUITE.TEST), which its suite's entry then leaves out. DISABLED_ tests
# are not registered.
#   cmake -D EXE=... -D OUT=... -D WORKDIR=... -D ALONE=REGEX -D PROPERTIES=NAME|VALUE|... -P gtest_suites_write.cmake
# PROPERTIES: set_tests_properties' NAME VALUE pairs for every test written, separated by | (a value holds no
# |). Each test passes --ranzcr_skipped_exit=77 (tests/gtest_main.cpp: exit 77 when every test it ran was
# skipped), so ctest reports a suite that ran nothing as skipped.
foreach(var EXE OUT WORKDIR ALONE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "gtest_suites_write.cmake: ${var} not set")
  endif()
endforeach()

execute_process(COMMAND "${EXE}" --gtest_list_tests WORKING_DIRECTORY "${WORKDIR}" TIMEOUT 120
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${rc}): ${errors}${listing}")
endif()

# --gtest_list_tests: "Suite." lines, then "  Test" lines; either may end with "  # TypeParam/GetParam() = ...".
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE " *#.*$" "" line "${line}")
  if(line MATCHES "^([^ ]+)\\.$")
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set(alone_${suite} "")
    set(count_${suite} 0)
  elseif(line MATCHES "^  ([^ ]+)$" AND NOT suite STREQUAL "")
    set(test "${CMAKE_MATCH_1}")
    if(test MATCHES "^DISABLED_" OR suite MATCHES "^DISABLED_")
      continue()
    endif()
    if("${suite}.${test}" MATCHES "${ALONE}")
      list(APPEND alone_${suite} "${suite}.${test}")
    else()
      math(EXPR count_${suite} "${count_${suite}} + 1")
    endif()
  endif()
endforeach()

set(props "")
string(REPLACE "|" ";" PROPERTIES "${PROPERTIES}")
foreach(p IN LISTS PROPERTIES)
  string(APPEND props " [==[${p}]==]")
endforeach()
set(text "# Written by tests/gtest_suites_write.cmake from ${EXE} --gtest_list_tests.\n")
macro(register name filter)
  string(APPEND text "add_test([==[${name}]==] [==[${EXE}]==] [==[--gtest_filter=${filter}]==] --ranzcr_skipped_exit=77)\n")
  string(APPEND text "set_tests_properties([==[${name}]==] PROPERTIES WORKING_DIRECTORY [==[${WORKDIR}]==] "
                     "SKIP_RETURN_CODE 77${props})\n")
endmacro()
foreach(suite IN LISTS suites)
  if(count_${suite} GREATER 0)
    set(filter "${suite}.*")
    if(alone_${suite})
      list(JOIN alone_${suite} ":" left_out)
      string(APPEND filter ":-${left_out}")
    endif()
    register("${suite}" "${filter}")
  endif()
  foreach(test IN LISTS alone_${suite})
    register("${test}" "${test}")
  endforeach()
endforeach()
file(WRITE "${OUT}.tmp" "${text}")
file(RENAME "${OUT}.tmp" "${OUT}")
