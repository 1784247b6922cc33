# resilience.replica_check_every on NP data-parallel ranks with one bit of
# rank 1's weights flipped after step 2 (EXAMOE_FAULT_FLIP_AT_STEP):
#   zero 0    the check after step 2 names rank 1 and the tensor, repairs it
#             from a majority replica, and every logged loss equals the
#             clean run's (the same layout: bit for bit);
#   zero 1    the same, repaired from the master parts, and the losses equal
#             the clean zero-0 run's to 1e-5 relative (another ZeRO stage);
#   dp 2      (zero 0, no majority) the run stops naming the tensor and
#             advising a resume from the last checkpoint;
#   zero 3    (no replicated copy) the key is refused at start.
# Every check is a metrics record {"event": "replica_check", ...}.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(common ${DECK} ${ARGS} --set train.steps=5 --set train.eval_every=0 --set checkpoint.every=0
           --set resilience.replica_check_every=2)
set(tensor layers.0.attn.wq.weight)

function(run_flipped np zero dir out_rc out_log)
  set(ENV{EXAMOE_FAULT_FLIP_AT_STEP} 2)
  set(ENV{EXAMOE_FAULT_RANK} 1)
  set(ENV{EXAMOE_FAULT_FLIP_TENSOR} ${tensor})
  execute_process(COMMAND ${MPIEXEC} -n ${np} ${EXAMOE} ${common} --set parallel.zero=${zero}
                          --set output.run_dir=${WORK}/${dir}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  unset(ENV{EXAMOE_FAULT_FLIP_AT_STEP})
  unset(ENV{EXAMOE_FAULT_RANK})
  unset(ENV{EXAMOE_FAULT_FLIP_TENSOR})
  append_error_logs(${WORK}/${dir} err)  # a mid-run error ends the job by MPI_Abort
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_log} "${out}\n${err}" PARENT_SCOPE)
endfunction()

# The replica_check records' mismatch counts must be `want` ("step:n;...").
function(require_checks dir want)
  values_of(${WORK}/${dir}/metrics.jsonl got mismatches)
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "${dir}: replica_check records ${got}, expected ${want}")
  endif()
endfunction()

run_checked(${MPIEXEC} -n ${NP} ${EXAMOE} ${common} --set parallel.zero=0 --set output.run_dir=${WORK}/clean)
losses_of(${WORK}/clean/metrics.jsonl clean)
message(STATUS "clean: ${clean}")
require_checks(clean "2:0;4:0")

# A flipped run at `zero` that must be detected and repaired from `source`.
function(run_repaired zero source)
  run_flipped(${NP} ${zero} zero${zero} rc log)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "zero ${zero}: the flipped run failed (${rc}):\n${log}")
  endif()
  require_in("${log}" "silent data corruption on rank 1: its copy of ${tensor}" "zero ${zero}")
  require_in("${log}" "repairing it from ${source}" "zero ${zero}")
  require_checks(zero${zero} "2:1;4:0")
  file(STRINGS ${WORK}/zero${zero}/metrics.jsonl rec REGEX "\"replica_check\".*\"repaired\":true")
  require_in("${rec}" "\"tensor\":\"${tensor}\"" "zero ${zero} metrics record")
  require_in("${rec}" "\"ranks\":[1]" "zero ${zero} metrics record")
endfunction()

run_repaired(0 "rank 0")
losses_of(${WORK}/zero0/metrics.jsonl got)
message(STATUS "zero 0, flipped: ${got}")
if(NOT got STREQUAL clean)
  message(FATAL_ERROR "zero 0: the repaired run logged ${got}, the clean run ${clean}")
endif()
run_repaired(1 "the master parts")
compare_steps(${WORK}/clean/metrics.jsonl ${WORK}/zero1/metrics.jsonl 5 "zero 1, flipped")

run_flipped(2 0 dp2 rc log)
if(rc EQUAL 0)
  message(FATAL_ERROR "dp 2: the run went on with disagreeing replicas and no majority:\n${log}")
endif()
require_in("${log}" "replicas of tensor ${tensor} disagree" "dp 2")
require_in("${log}" "Resume from the last checkpoint" "dp 2")

# ZeRO 3 holds no replicated copy: the key is refused at start.
run_flipped(2 3 zero3 rc log)
if(rc EQUAL 0)
  message(FATAL_ERROR "zero 3: the run accepted resilience.replica_check_every:\n${log}")
endif()
require_in("${log}" "no rank holds one" "zero 3")
