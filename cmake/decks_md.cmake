# docs/decks.md is the output of `examoe --keys --format markdown`, byte for
# byte. Checks that it is (ctest docs.decks_current) or rewrites it (the
# build target decks-md).
#
#   cmake -DEXAMOE=<examoe> -DDOC=<docs/decks.md> -DOUT=<scratch file> [-DUPDATE=ON] -P decks_md.cmake
cmake_minimum_required(VERSION 3.20)

execute_process(COMMAND ${EXAMOE} --keys --format markdown RESULT_VARIABLE rc OUTPUT_VARIABLE generated
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXAMOE} --keys --format markdown failed (exit code ${rc}):\n${err}")
endif()
if(UPDATE)
  file(WRITE ${DOC} "${generated}")
  message(STATUS "wrote ${DOC}")
  return()
endif()
if(EXISTS ${DOC})
  file(READ ${DOC} current)
endif()
if(NOT "${current}" STREQUAL "${generated}")
  file(WRITE ${OUT} "${generated}")
  set(diff "")
  find_program(DIFF diff)
  if(DIFF)
    execute_process(COMMAND ${DIFF} -u ${DOC} ${OUT} OUTPUT_VARIABLE diff)
  endif()
  message(FATAL_ERROR "${DOC} is stale: it differs from `examoe --keys --format markdown` (the deck schema, "
                      "src/core/deck/schema.cpp). Regenerate it with `cmake --build <build dir> --target decks-md` "
                      "and commit it.\n${diff}")
endif()
