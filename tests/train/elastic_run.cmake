# Shared by the examoe-elastic ctest scripts: one supervised run with a fault
# injected into its first launch, and the restart records it leaves.

# elastic_run_with_fault(STEP RANK SIGNAL TIMEOUT ARGS...): runs
# ${ELASTIC} ARGS... with rank RANK ending after step STEP (by SIGNAL, or an
# abrupt exit when SIGNAL is ""), fails the test unless the supervisor exits
# 0, and sets `all` (its stdout and stderr) in the caller.
function(elastic_run_with_fault step rank signal timeout)
  set(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP} ${step})
  set(ENV{EXAMOE_FAULT_RANK} ${rank})
  if(NOT signal STREQUAL "")
    set(ENV{EXAMOE_FAULT_SIGNAL} ${signal})
  endif()
  execute_process(COMMAND ${ELASTIC} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${timeout})
  unset(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP})
  unset(ENV{EXAMOE_FAULT_RANK})
  unset(ENV{EXAMOE_FAULT_SIGNAL})
  set(all "${out}\n${err}" PARENT_SCOPE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "examoe-elastic exited ${rc}:\n${out}\n${err}")
  endif()
endfunction()

# elastic_records(COUNT WHAT VAR): the lines of ${WORK}/elastic/elastic.jsonl
# into VAR; the test fails unless there are COUNT of them (WHAT names them).
function(elastic_records count what var)
  file(STRINGS ${WORK}/elastic/elastic.jsonl records)
  list(LENGTH records n)
  if(NOT n EQUAL count)
    message(FATAL_ERROR "expected ${count} ${what} in elastic.jsonl, got ${n}:\n${records}")
  endif()
  set(${var} "${records}" PARENT_SCOPE)
endfunction()
