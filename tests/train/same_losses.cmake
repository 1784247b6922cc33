# cmake -DREF=<metrics.jsonl> -DRUN=<metrics.jsonl> -P same_losses.cmake
# RUN's step records (a run that was stopped and resumed, appending to one
# metrics.jsonl) are REF's (the uninterrupted run's), step for step and
# digit for digit. Used by the shell-driven stop/resume tests.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
losses_of(${REF} ref)
losses_of(${RUN} run)
message(STATUS "uninterrupted:     ${ref}")
message(STATUS "stopped + resumed: ${run}")
list(LENGTH ref n)
if(n EQUAL 0)
  message(FATAL_ERROR "${REF} holds no step records")
endif()
if(NOT ref STREQUAL run)
  message(FATAL_ERROR "the stopped and resumed run's losses differ from the uninterrupted run's")
endif()
