# Sequence parallelism's activation memory: at tp = NP the per-rank bytes
# of activations the run reports (its own accounting, metrics.jsonl
# "memory.activations") with parallel.sequence_parallel are at most LIMIT of
# the same layout's without it.
#   -DNP=4 -DLIMIT=0.60 -DARGS=<deck and --set ...>
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})

# activation_bytes(<metrics.jsonl> <out>): memory.activations of the first step record.
function(activation_bytes file out)
  values_of(${file} recs memory activations)
  if(recs STREQUAL "")
    message(FATAL_ERROR "${file} has no step record with memory.activations")
  endif()
  list(GET recs 0 first)
  string(REGEX REPLACE ".*:" "" b "${first}")
  set(${out} ${b} PARENT_SCOPE)
endfunction()

foreach(sp false true)
  run_checked(${MPIEXEC} -n ${NP} ${EXAMOE} ${ARGS} --set train.steps=1 --set train.grad_accum=1
              --set parallel.tp=${NP} --set parallel.sequence_parallel=${sp} --set output.run_dir=${WORK}/sp_${sp})
  activation_bytes(${WORK}/sp_${sp}/metrics.jsonl act_${sp})
endforeach()
execute_process(COMMAND awk "BEGIN{printf \"%.4f\", ${act_true}/${act_false}}" OUTPUT_VARIABLE ratio)
message(STATUS "activations per rank at tp=${NP}: ${act_false} B, with sequence parallelism ${act_true} B, "
               "ratio ${ratio} (limit ${LIMIT})")
execute_process(COMMAND awk "BEGIN{exit !(${act_false} > 0 && ${ratio} <= ${LIMIT})}" RESULT_VARIABLE ok)
if(NOT ok EQUAL 0)
  message(FATAL_ERROR "sequence parallelism keeps ${ratio} of the activation bytes of tp=${NP} without it; the "
                      "limit is ${LIMIT}")
endif()
