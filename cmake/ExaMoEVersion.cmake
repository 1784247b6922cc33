# Git hash for `examoe --version`; "unknown" outside a git checkout.
set(EXAMOE_GIT_HASH "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _h
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _r)
  if(_r EQUAL 0 AND _h)
    set(EXAMOE_GIT_HASH ${_h})
  endif()
endif()
