# A resume inside a distillation window whose teacher snapshot is gone
# stops with an error naming the directory and the fixes, and writes
# nothing: the checkpoint it was asked to resume from is kept. examoe
# --check finds the same before the job runs.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(common ${DECK} ${ARGS} --set train.steps=6 --set checkpoint.every=3 --set growth.every=2 --set growth.add=2
    --set growth.max_experts=8 --set growth.distill_steps=2 --set output.run_dir=${WORK}/run)
set(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP} 3)
execute_process(COMMAND ${EXAMOE} ${common} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
unset(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP})
if(NOT rc EQUAL 86)
  message(FATAL_ERROR "the injected fault did not fire (exit ${rc}):\n${out}\n${err}")
endif()
if(NOT IS_DIRECTORY ${WORK}/run/ckpt/teacher/step_00000002)
  message(FATAL_ERROR "the event after step 2 wrote no teacher snapshot under ${WORK}/run/ckpt/teacher")
endif()
# With the snapshot, --check says it will read it; without, --check and
# the resume both stop on it.
execute_process(COMMAND ${EXAMOE} ${common} --set checkpoint.resume=true --check RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--check of the resume failed (${rc}):\n${out}\n${err}")
endif()
require_in("${out}" "inside the distillation window of the growth after step 2, its teacher" "--check")
file(REMOVE_RECURSE ${WORK}/run/ckpt/teacher)
execute_process(COMMAND ${EXAMOE} ${common} --set checkpoint.resume=true --check RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "--check of a resume inside the window without its teacher passed:\n${out}")
endif()
require_in("${err}" "inside the distillation window of the growth event after step 2" "--check's error")
execute_process(COMMAND ${EXAMOE} ${common} --set checkpoint.resume=true RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "a resume inside the window without its teacher ran:\n${out}")
endif()
require_in("${err}" "inside the distillation window of the growth event after step 2" "the error")
require_in("${err}" "run/ckpt/teacher/step_00000002" "the error")
require_in("${err}" "set growth.distill_steps = 0" "the error")
if(NOT IS_DIRECTORY ${WORK}/run/ckpt/step_00000003)
  message(FATAL_ERROR "the failed resume lost the step-3 checkpoint")
endif()
