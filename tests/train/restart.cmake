include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/a ${WORK}/b)
set(common ${DECK} ${ARGS} --set train.steps=6 --set checkpoint.every=3)

run_checked(${EXAMOE} ${common} --set output.run_dir=${WORK}/a)

# Killed right after the step-3 checkpoint (exit code 86 from fault
# injection). Under mpiexec the launcher reports whichever rank it saw end
# first: 86, or the signal it stopped a slower rank with (1 or 9, which one
# depends on timing), so any failing exit counts when a rank's own line says
# the fault fired.
set(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP} 3)
execute_process(COMMAND ${EXAMOE} ${common} --set output.run_dir=${WORK}/b RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
unset(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP})
if(NOT (rc EQUAL 86 OR (NOT rc EQUAL 0 AND "${out}${err}" MATCHES "exiting abruptly after step 3 [(]fault injection[)]")))
  message(FATAL_ERROR "the injected fault did not fire (exit ${rc}):\n${out}\n${err}")
endif()
run_checked(${EXAMOE} ${common} --set output.run_dir=${WORK}/b --set checkpoint.resume=true)

losses_of(${WORK}/a/metrics.jsonl full)
losses_of(${WORK}/b/metrics.jsonl restarted)
message(STATUS "uninterrupted: ${full}")
message(STATUS "killed+resumed: ${restarted}")
list(LENGTH restarted n)
if(NOT n EQUAL 6)
  message(FATAL_ERROR "expected 6 step records (3 before the kill, 3 after the restart), got ${n}")
endif()
if(NOT full STREQUAL restarted)
  message(FATAL_ERROR "the restarted run's losses differ from the uninterrupted run's")
endif()

# A run with expert re-placement must really have moved experts before the
# step-3 checkpoint, so that the resume had a placement to take back (the
# losses after it show whether it did).
if(ARGS MATCHES "moe\\.replace_every")
  file(STRINGS ${WORK}/b/metrics.jsonl moves
       REGEX "\"event\":\"expert_replacement\".*\"moved\":[1-9].*\"step\":[123][,}]")
  list(LENGTH moves n)
  message(STATUS "${n} re-placements that moved experts before the kill")
  if(n EQUAL 0)
    message(FATAL_ERROR "the run moved no expert before the step-3 checkpoint: no expert_replacement record with "
                        "moved > 0 at steps 1-3")
  endif()
endif()

# -DCHECK_BIAS=ON (aux_free runs): the routing biases moved after the first
# step and the restarted run logs the uninterrupted run's biases.
if(CHECK_BIAS)
  values_of(${WORK}/a/metrics.jsonl bias_full moe layers 0 router_bias)
  values_of(${WORK}/b/metrics.jsonl bias_restarted moe layers 0 router_bias)
  list(GET bias_full 0 first)
  string(REGEX REPLACE "^[0-9]+:" "" first "${first}")
  message(STATUS "biases of layer 0: ${bias_full}")
  list(LENGTH bias_full nb)
  if(NOT nb EQUAL 6 OR NOT first MATCHES "[1-9]")
    message(FATAL_ERROR "expected 6 records with router biases that moved after step 1, got: ${bias_full}")
  endif()
  if(NOT bias_full STREQUAL bias_restarted)
    message(FATAL_ERROR "the restarted run's router biases differ:\n${bias_full}\n${bias_restarted}")
  endif()
endif()
