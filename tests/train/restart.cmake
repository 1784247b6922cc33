include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/a ${WORK}/b)
set(common ${DECK} ${ARGS} --set train.steps=6 --set checkpoint.every=3)

run_checked(${EXAMOE} ${common} --set output.run_dir=${WORK}/a)

# Killed right after the step-3 checkpoint (exit code 86 from fault injection).
set(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP} 3)
execute_process(COMMAND ${EXAMOE} ${common} --set output.run_dir=${WORK}/b RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
unset(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP})
if(NOT rc EQUAL 86)
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
