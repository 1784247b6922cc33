# output.metrics_every and train.log_every are separate cadences:
#   * log_every = 4, metrics_every = 1 over 6 steps: a record for every step
#     (1..6, each once) and log lines at steps 4 and 6 only;
#   * log_every = 1, metrics_every = 3, a checkpoint at step 2: log lines for
#     every step; records at 2 and 4 (a checkpoint ends the record's
#     interval, so a resume from it never loses or repeats a record), 3 and 6.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(common ${DECK} ${ARGS} --set train.steps=6 --set train.eval_every=0)

function(run_case name)
  execute_process(COMMAND ${EXAMOE} ${common} --set output.run_dir=${WORK}/${name} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: examoe failed (${rc}):\n${out}\n${err}")
  endif()
  string(REGEX MATCHALL "step +[0-9]+/6 \\|" lines "${out}${err}")
  set(logged "")
  foreach(l IN LISTS lines)
    string(REGEX REPLACE "step +([0-9]+)/6 \\|" "\\1" s "${l}")
    list(APPEND logged ${s})
  endforeach()
  losses_of(${WORK}/${name}/metrics.jsonl recs)
  set(recorded "")
  foreach(r IN LISTS recs)
    string(REGEX REPLACE ":.*" "" s "${r}")
    list(APPEND recorded ${s})
  endforeach()
  set(logged "${logged}" PARENT_SCOPE)
  set(recorded "${recorded}" PARENT_SCOPE)
endfunction()

function(require_list what got want)
  if(NOT "${got}" STREQUAL "${want}")
    message(FATAL_ERROR "${what}: got steps [${got}], expected [${want}]")
  endif()
  message(STATUS "${what}: ${got}")
endfunction()

run_case(records_every_step --set train.log_every=4 --set output.metrics_every=1 --set checkpoint.every=0)
require_list("every_step: log lines" "${logged}" "4;6")
require_list("every_step: records" "${recorded}" "1;2;3;4;5;6")

run_case(records_every_3 --set train.log_every=1 --set output.metrics_every=3 --set checkpoint.every=2)
require_list("every_3: log lines" "${logged}" "1;2;3;4;5;6")
# Checkpoints at 2, 4 and 6 each end an interval, as do records at 3 and 6.
require_list("every_3: records" "${recorded}" "2;3;4;6")
