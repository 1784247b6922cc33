# Expert parallelism's memory: at ep = NP the per-rank bytes of the routed
# experts' parameters + gradients + optimizer state that the run reports
# (its own accounting, metrics.jsonl "memory.experts") are at most LIMIT of
# the single-rank run's (ideal 1/NP).
#   -DREF=<single-rank run dir> -DNP=4 -DLIMIT=0.27 -DEXTRA="--set parallel.ep=4 ..."
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
separate_arguments(EXTRA)
file(REMOVE_RECURSE ${WORK})
run_checked(${MPIEXEC} -n ${NP} ${EXAMOE} ${ARGS} --set train.steps=1 --set train.grad_accum=1 ${EXTRA}
            --set output.run_dir=${WORK})

function(expert_bytes file out)
  file(STRINGS ${file} lines)
  foreach(line IN LISTS lines)
    string(JSON b ERROR_VARIABLE none GET "${line}" memory experts)
    if(none STREQUAL "NOTFOUND")
      set(${out} ${b} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "${file} has no step record with memory.experts")
endfunction()

expert_bytes(${REF}/metrics.jsonl one)
expert_bytes(${WORK}/metrics.jsonl many)
execute_process(COMMAND awk "BEGIN{exit !(${one} > 0)}" RESULT_VARIABLE some)
if(NOT some EQUAL 0)
  message(FATAL_ERROR "the single-rank run reports no expert bytes (${one})")
endif()
execute_process(COMMAND awk "BEGIN{printf \"%.4f\", ${many}/${one}}" OUTPUT_VARIABLE ratio)
message(STATUS "expert params+grads+optim per rank: one rank ${one} B, ${NP} ranks (${EXTRA}) ${many} B, "
               "ratio ${ratio} (limit ${LIMIT}, ideal 1/${NP})")
execute_process(COMMAND awk "BEGIN{exit !(${ratio} <= ${LIMIT})}" RESULT_VARIABLE ok)
if(NOT ok EQUAL 0)
  message(FATAL_ERROR "${EXTRA} keeps ${ratio} of the single-rank expert bytes per rank; the limit is ${LIMIT}")
endif()
