# Runs the examoe driver once and checks its exit code and output, so a
# ctest test checks both (PASS_REGULAR_EXPRESSION alone ignores the exit code).
#
#   cmake -DEXAMOE=<exe> -DARGS="<args, shell-quoted>" -DRC=<expected exit code>
#         [-DDECK=<bad deck>]        append the deck, --check and its "# ranks:"/"# set:"
#                                    header lines to ARGS; expect its "# expect:" message
#         [-DSTDERR_IS=<text>]       stderr must be exactly "<text>\n"
#         [-DSTDERR_HAS=a|b]         stderr must be one "examoe: error: " line holding each fragment
#         [-DSTDOUT_HAS=a|b]         stdout must contain each '|'-separated fragment
# (A ';' in a -D value splits it into two arguments on the way through
# add_test, so fragments avoid ';' or escape it as "\\;".)
#         [-DLAUNCHER=a|b|c]         prefix command, '|'-separated (mpiexec|-n|2)
#         -P run_examoe.cmake
cmake_minimum_required(VERSION 3.20)

separate_arguments(args UNIX_COMMAND "${ARGS}")
if(DECK)
  # Read the header as one string: the messages contain ';', which CMake
  # list handling (file(STRINGS)) would split on.
  file(READ "${DECK}" text)
  if(NOT text MATCHES "# expect: ([^\n]*)")
    message(FATAL_ERROR "${DECK} has no '# expect: ' line")
  endif()
  string(REPLACE "{deck}" "${DECK}" STDERR_IS "examoe: error: ${CMAKE_MATCH_1}")
  list(APPEND args "${DECK}" --check)
  if(text MATCHES "# ranks: ([0-9]+)")
    list(APPEND args --ranks ${CMAKE_MATCH_1})
  endif()
  string(REGEX MATCHALL "# set: [^\n]*" sets "${text}")
  foreach(s IN LISTS sets)
    string(SUBSTRING "${s}" 7 -1 s)
    list(APPEND args --set "${s}")
  endforeach()
endif()
string(REPLACE "|" ";" launcher "${LAUNCHER}")

execute_process(COMMAND ${launcher} ${EXAMOE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REPLACE ";" " " shown "${launcher} ${EXAMOE} ${args}")
set(report "command: ${shown}\nexit code: ${rc}\n--- stdout\n${out}--- stderr\n${err}---")
if(NOT "${rc}" STREQUAL "${RC}")
  message(FATAL_ERROR "expected exit code ${RC}\n${report}")
endif()
if(DEFINED STDERR_IS AND NOT "${err}" STREQUAL "${STDERR_IS}\n")
  message(FATAL_ERROR "expected stderr to be exactly\n${STDERR_IS}\n${report}")
endif()
# Each '|'-separated fragment of `fragments` must occur in `text`.
function(require_fragments text fragments what)
  string(REPLACE "|" ";" list "${fragments}")
  foreach(f IN LISTS list)
    string(FIND "${text}" "${f}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "expected ${what} to contain\n${f}\n${report}")
    endif()
  endforeach()
endfunction()
if(DEFINED STDERR_HAS)
  if(NOT err MATCHES "^examoe: error: [^\n]*\n$")
    message(FATAL_ERROR "expected exactly one 'examoe: error: ...' line on stderr\n${report}")
  endif()
  require_fragments("${err}" "${STDERR_HAS}" stderr)
endif()
require_fragments("${out}" "${STDOUT_HAS}" stdout)
