# ZeRO-3 memory: at dp = NP, the per-rank bytes of parameters + gradients +
# optimizer state that the run reports (its own accounting, metrics.jsonl)
# are at most LIMIT of the single-rank run's (ideal 1/NP). The unit buffers
# that hold a gathered layer and its gradient are reported separately
# ("buffers") and printed here.
#   -DREF=<single-rank run dir> -DNP=4 -DLIMIT=0.30 [-DLAYOUT=<label>]
# (ARGS may set parallel.tp: tensor parallelism splits the boxes ZeRO then
# shards over what is left of the ranks.)
if(NOT DEFINED LAYOUT)
  set(LAYOUT "dp=${NP} zero=3")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
run_checked(${MPIEXEC} -n ${NP} ${EXAMOE} ${ARGS} --set train.steps=1 --set parallel.zero=3
            --set output.run_dir=${WORK})

# state_bytes(<metrics.jsonl> <out> <buffers-out>) from the first step record.
function(state_bytes file out buf_out)
  file(STRINGS ${file} lines)
  foreach(line IN LISTS lines)
    string(JSON mem ERROR_VARIABLE none GET "${line}" memory)
    if(none STREQUAL "NOTFOUND")
      string(JSON p GET "${mem}" params)
      string(JSON g GET "${mem}" grads)
      string(JSON o GET "${mem}" optim)
      string(JSON b GET "${mem}" buffers)
      execute_process(COMMAND awk "BEGIN{printf \"%.0f\", ${p}+${g}+${o}}" OUTPUT_VARIABLE sum)
      set(${out} ${sum} PARENT_SCOPE)
      set(${buf_out} ${b} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "${file} has no step record with a memory report")
endfunction()

state_bytes(${REF}/metrics.jsonl one one_buf)
state_bytes(${WORK}/metrics.jsonl many many_buf)
execute_process(COMMAND awk "BEGIN{printf \"%.4f\", ${many}/${one}}" OUTPUT_VARIABLE ratio)
message(STATUS "params+grads+optim per rank: one rank ${one} B, ${LAYOUT} ${many} B, ratio ${ratio} "
               "(limit ${LIMIT}, ideal 1/${NP}); zero-3 unit buffers ${many_buf} B")
execute_process(COMMAND awk "BEGIN{exit !(${ratio} <= ${LIMIT})}" RESULT_VARIABLE ok)
if(NOT ok EQUAL 0)
  message(FATAL_ERROR "${LAYOUT} keeps ${ratio} of the single-rank parameter, gradient and optimizer "
                      "bytes per rank; the limit is ${LIMIT}")
endif()
