# resilience.nan_policy with a NaN injected into the loss of step 4
# (EXAMOE_FAULT_NAN_AT_STEP, once per process, as a transient fault):
#   abort     fails naming the step and the policy;
#   skip      drops step 4 (a log line, nonfinite_steps = 1 in the metrics),
#             steps 1-3 as the clean run;
#   rollback  reloads the step-2 checkpoint, re-runs steps 3 and 4 and ends
#             with every logged loss equal to the clean run's.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(common ${DECK} ${ARGS} --set train.steps=6 --set checkpoint.every=2 --set train.eval_every=0)

run_checked(${EXAMOE} ${common} --set output.run_dir=${WORK}/clean)
losses_of(${WORK}/clean/metrics.jsonl clean)
message(STATUS "clean: ${clean}")

function(run_injected policy out_rc out_log)
  set(ENV{EXAMOE_FAULT_NAN_AT_STEP} 4)
  execute_process(COMMAND ${EXAMOE} ${common} --set output.run_dir=${WORK}/${policy}
                          --set resilience.nan_policy=${policy}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  unset(ENV{EXAMOE_FAULT_NAN_AT_STEP})
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_log} "${out}\n${err}" PARENT_SCOPE)
endfunction()

# The clean record of `step`, or a FATAL_ERROR.
function(clean_loss step out)
  foreach(r IN LISTS clean)
    if(r MATCHES "^${step}:")
      set(${out} "${r}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "the clean run has no step ${step}")
endfunction()

run_injected(abort rc log)
if(rc EQUAL 0)
  message(FATAL_ERROR "nan_policy = abort: the run went on past a NaN loss:\n${log}")
endif()
require_in("${log}" "step 4: the loss is nan" "abort")
require_in("${log}" "resilience.nan_policy" "abort")

run_injected(skip rc log)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nan_policy = skip failed (${rc}):\n${log}")
endif()
require_in("${log}" "step dropped, no update" "skip")
values_of(${WORK}/skip/metrics.jsonl counts nonfinite_steps)
message(STATUS "skip: nonfinite_steps ${counts}")
if(NOT counts STREQUAL "1:0;2:0;3:0;4:1;5:1;6:1")
  message(FATAL_ERROR "skip: expected nonfinite_steps 0 before step 4 and 1 from it, got ${counts}")
endif()
values_of(${WORK}/skip/metrics.jsonl skipped skipped)
if(NOT skipped MATCHES "4:ON" OR skipped MATCHES "[1-35-6]:ON")
  message(FATAL_ERROR "skip: expected only step 4 marked skipped, got ${skipped}")
endif()
losses_of(${WORK}/skip/metrics.jsonl got)
foreach(s 1 2 3)
  clean_loss(${s} want)
  math(EXPR i "${s} - 1")
  list(GET got ${i} have)
  if(NOT have STREQUAL want)
    message(FATAL_ERROR "skip: step ${s} logged ${have}, the clean run ${want}")
  endif()
endforeach()

run_injected(rollback rc log)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nan_policy = rollback failed (${rc}):\n${log}")
endif()
require_in("${log}" "rolled back from step 4 to the checkpoint of step 2" "rollback")
losses_of(${WORK}/rollback/metrics.jsonl got)
message(STATUS "rollback: ${got}")
# Steps 1-3, then (after the rollback) 3-6: the re-run steps repeat the clean losses.
list(LENGTH got n)
if(NOT n EQUAL 7)
  message(FATAL_ERROR "rollback: expected 7 step records (1-3, then 3-6 after the rollback), got ${n}")
endif()
foreach(rec IN LISTS got)
  string(REGEX REPLACE ":.*" "" s "${rec}")
  clean_loss(${s} want)
  if(NOT rec STREQUAL want)
    message(FATAL_ERROR "rollback: logged ${rec}, the clean run ${want}")
  endif()
endforeach()
