# checkpoint.async = true on NP ranks against a synchronous run of the same
# deck (6 steps, a checkpoint every 2):
#   * uninterrupted, it logs the same losses, reports its stall and write
#     times, and its checkpoint verifies (examoe-ckpt verify);
#   * killed in the middle of the async write of step 4
#     (EXAMOE_FAULT_EXIT_IN_ASYNC_WRITE), `latest` still names step 2, and
#     the resumed run starts from step 2 and logs the synchronous run's losses.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(launch ${MPIEXEC} -n ${NP})
set(common ${DECK} ${ARGS} --set train.steps=6 --set checkpoint.every=2 --set train.eval_every=0)

# Every record of `file` equals the synchronous run's record of its step.
function(require_sync_losses file label)
  losses_of(${file} got)
  message(STATUS "${label}: ${got}")
  foreach(rec IN LISTS got)
    string(REGEX REPLACE ":.*" "" s "${rec}")
    list(FIND sync "${rec}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${label}: logged ${rec}; the synchronous run: ${sync}")
    endif()
  endforeach()
  list(GET got -1 last)
  if(NOT last MATCHES "^6:")
    message(FATAL_ERROR "${label}: the run did not reach step 6: ${got}")
  endif()
endfunction()

run_checked(${launch} ${EXAMOE} ${common} --set output.run_dir=${WORK}/sync)
losses_of(${WORK}/sync/metrics.jsonl sync)
message(STATUS "synchronous: ${sync}")

execute_process(COMMAND ${launch} ${EXAMOE} ${common} --set checkpoint.async=true --set output.run_dir=${WORK}/async
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the async run failed (${rc}):\n${out}\n${err}")
endif()
require_in("${out}${err}" "in the background in" "async")
require_in("${out}${err}" "training stalled" "async")
require_sync_losses(${WORK}/async/metrics.jsonl "async")
run_checked(${CKPT} verify ${WORK}/async)

# checkpoint.async_policy = skip with a slow writer: the step-4 checkpoint
# finds step 2's write in flight and is skipped (on every rank), the run
# goes on with the same losses.
set(ENV{EXAMOE_FAULT_ASYNC_WRITE_DELAY_S} 3)
execute_process(COMMAND ${launch} ${EXAMOE} ${common} --set checkpoint.async=true --set checkpoint.async_policy=skip
                        --set output.run_dir=${WORK}/skip
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
unset(ENV{EXAMOE_FAULT_ASYNC_WRITE_DELAY_S})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the async run with policy skip failed (${rc}):\n${out}\n${err}")
endif()
require_in("${out}${err}" "checkpoint: step 4 skipped: the async write of the previous one is still in flight" "skip")
require_sync_losses(${WORK}/skip/metrics.jsonl "async, policy skip")
if(EXISTS ${WORK}/skip/ckpt/step_00000004 OR NOT EXISTS ${WORK}/skip/ckpt/step_00000006)
  message(FATAL_ERROR "policy skip: expected step_00000006 and no step_00000004 in ${WORK}/skip/ckpt")
endif()

set(ENV{EXAMOE_FAULT_EXIT_IN_ASYNC_WRITE} 4)
execute_process(COMMAND ${launch} ${EXAMOE} ${common} --set checkpoint.async=true --set output.run_dir=${WORK}/crash
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
unset(ENV{EXAMOE_FAULT_EXIT_IN_ASYNC_WRITE})
if(rc EQUAL 0)
  message(FATAL_ERROR "the crash in the async write did not happen:\n${out}\n${err}")
endif()
require_in("${out}${err}" "exiting in the middle of the async write" "crash")
file(READ_SYMLINK ${WORK}/crash/ckpt/latest latest)
if(NOT latest STREQUAL "step_00000002")
  message(FATAL_ERROR "after a crash in the write of step 4, latest is ${latest}, not step_00000002")
endif()
if(EXISTS ${WORK}/crash/ckpt/step_00000004)
  message(FATAL_ERROR "the cut-short write of step 4 is visible as step_00000004")
endif()
file(GLOB partial LIST_DIRECTORIES true ${WORK}/crash/ckpt/.step_00000004.tmp-*)
if(partial STREQUAL "")
  message(FATAL_ERROR "no .step_00000004.tmp-* left by the crash: was the write cut short?")
endif()

execute_process(COMMAND ${launch} ${EXAMOE} ${common} --set checkpoint.async=true --set checkpoint.resume=true
                        --set output.run_dir=${WORK}/crash
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the resumed run failed (${rc}):\n${out}\n${err}")
endif()
require_in("${out}${err}" "step_00000002 at step 2" "resume")
require_sync_losses(${WORK}/crash/metrics.jsonl "killed in the async write, resumed")
