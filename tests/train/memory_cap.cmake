# memory.cap_gb: a cap between the ledger's peak sums of recompute = "none"
# and "full" (measured here, so the test follows the model) stops the none
# run after step 1 with the table and the policies that fit, on one rank
# and on NP ranks together, while the full run trains under it; --check
# estimates the table beforehand and names a policy that fits.
#   -DEXAMOE -DMPIEXEC -DNP -DDECK -DWORK "-DARGS=..."
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(cats parameters gradients optimizer activations communication checkpoint workspace offload)
foreach(mode none full)
  run_checked(${EXAMOE} ${DECK} ${ARGS} --set memory.recompute=${mode} --set output.run_dir=${WORK}/${mode})
  ledger_peak_sum(${WORK}/${mode} 1 sum_${mode} ${cats})
endforeach()
message(STATUS "ledger peak sums: none ${sum_none} B, full ${sum_full} B")
if(NOT sum_full LESS sum_none)
  message(FATAL_ERROR "full recompute does not lower the ledger's peak (${sum_full} vs ${sum_none} B)")
endif()
execute_process(COMMAND awk "BEGIN{printf \"%.9f\", (${sum_none} + ${sum_full}) / 2 / 1073741824}"
                OUTPUT_VARIABLE cap)
message(STATUS "memory.cap_gb = ${cap}")

# Over the cap: exit 1 after step 1, every rank, with the table and advice.
foreach(np 1 ${NP})
  set(launch ${EXAMOE})
  if(np GREATER 1)
    set(launch ${MPIEXEC} -n ${np} ${EXAMOE})
  endif()
  execute_process(COMMAND ${launch} ${DECK} ${ARGS} --set memory.cap_gb=${cap}
                          --set output.run_dir=${WORK}/capped_${np}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${np} rank(s): the run above memory.cap_gb = ${cap} succeeded:\n${out}")
  endif()
  if(np GREATER 1)
    # Every rank has the error and ends the job (MPI_Abort).
    file(GLOB logs ${WORK}/capped_${np}/error.rank*.log)
    if(NOT logs)
      message(FATAL_ERROR "${np} ranks: no error.rank<N>.log in ${WORK}/capped_${np} after the run above the cap:\n"
                          "${out}${err}")
    endif()
    append_error_logs(${WORK}/capped_${np} err)
  endif()
  if(NOT "${out}${err}" MATCHES "memory.cap_gb = [0-9.e-]+: rank [0-9]+ needed [0-9.]+ GiB by step 1 \\(MiB: parameters ")
    message(FATAL_ERROR "${np} rank(s), over the cap: no table in the error:\n${out}${err}")
  endif()
  require_in("${out}${err}" "memory.recompute = \"selective\"" "${np} rank(s), over the cap")
  if("${out}${err}" MATCHES "step +2/")
    message(FATAL_ERROR "${np} rank(s): the capped run went on past step 1:\n${out}")
  endif()
endforeach()

# Under it: full recompute trains, and its ledger stays below the cap.
run_checked(${EXAMOE} ${DECK} ${ARGS} --set memory.recompute=full --set memory.cap_gb=${cap}
            --set output.run_dir=${WORK}/full_capped)

# --check: the estimate, and a policy that fits.
execute_process(COMMAND ${EXAMOE} ${DECK} ${ARGS} --set memory.cap_gb=${cap} --check
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--check failed (${rc}):\n${out}${err}")
endif()
require_in("${out}" "memory estimate per rank (MiB, the planner's model; pipeline stage 0): parameters " "--check")
require_in("${out}" "WARNING: memory.cap_gb = " "--check")
if(NOT out MATCHES "memory.recompute = \"(selective|full)\"[^\n]* would fit")
  message(FATAL_ERROR "--check names no recompute policy that fits:\n${out}")
endif()
