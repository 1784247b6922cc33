# precision.compute = "bf16" keeps the routed experts' permuted rows and
# SwiGLU activations (xp [rows,d], ea, eb, eh [rows,F]) in bf16: on one
# rank the activation bytes of the run's own accounting are fp32's less
# exactly half of theirs, EXPECT bytes (given by the caller from the
# deck's shape).
#   -DEXAMOE=... -DDECK=... -DWORK=... -DARGS="..." -DEXPECT=<bytes>
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
foreach(p fp32 bf16)
  run_checked(${EXAMOE} ${DECK} ${ARGS} --set precision.compute=${p} --set output.run_dir=${WORK}/${p})
  values_of(${WORK}/${p}/metrics.jsonl act_${p} memory activations)
  list(GET act_${p} -1 a)
  string(REGEX REPLACE ".*:" "" a "${a}")
  set(bytes_${p} ${a})
endforeach()
execute_process(COMMAND awk "BEGIN{printf \"%.0f\", ${bytes_fp32} - ${bytes_bf16}}" OUTPUT_VARIABLE saved)
message(STATUS "activation bytes: fp32 ${bytes_fp32}, bf16 ${bytes_bf16}, saved ${saved} (expected ${EXPECT})")
if(NOT saved STREQUAL "${EXPECT}")
  message(FATAL_ERROR "bf16 saved ${saved} activation bytes, expected ${EXPECT}: the routed experts' tensors are "
                      "not (all) stored in bf16")
endif()
