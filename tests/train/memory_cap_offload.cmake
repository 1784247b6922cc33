# memory.cap_gb with offload: a cap between the ledger's step-2 peak sums
# (the steady state: step 1's interval has the start-up's allocations) of a run
# with full recompute and the same run with its experts and their
# optimizer state offloaded (measured here, so the test follows the
# model): the recompute-only run stops after step 1 naming the offload
# that fits, the offloaded run trains under the cap, and --check names
# the offload policy beforehand.
#   -DEXAMOE -DDECK -DWORK "-DARGS=..."
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/tier)
set(cats parameters gradients optimizer activations communication checkpoint workspace offload)
set(args_full --set memory.recompute=full)
set(args_offload ${args_full} --set memory.offload_experts=true --set memory.offload_optimizer=true
                 --set memory.offload_prefetch=1)
if(NOT HOST_MEMORY_TIER)  # a CUDA build's tier is host memory, with no directory
  list(APPEND args_offload --set memory.offload_dir=${WORK}/tier)
endif()
foreach(mode full offload)
  run_checked(${EXAMOE} ${DECK} ${ARGS} ${args_${mode}} --set output.run_dir=${WORK}/${mode})
  ledger_peak_sum(${WORK}/${mode} 2 sum_${mode} ${cats})
endforeach()
message(STATUS "ledger peak sums: full recompute ${sum_full} B, with offload ${sum_offload} B")
execute_process(COMMAND awk "BEGIN{exit !(${sum_offload} < 0.7 * ${sum_full})}" RESULT_VARIABLE ok)
if(NOT ok EQUAL 0)
  message(FATAL_ERROR "offload does not lower the ledger's peak below 0.7 x (${sum_offload} vs ${sum_full} B)")
endif()
execute_process(COMMAND awk "BEGIN{printf \"%.9f\", (${sum_full} + ${sum_offload}) / 2 / 1073741824}"
                OUTPUT_VARIABLE cap)
message(STATUS "memory.cap_gb = ${cap}")

execute_process(COMMAND ${EXAMOE} ${DECK} ${ARGS} ${args_full} --set memory.cap_gb=${cap}
                        --set output.run_dir=${WORK}/capped
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "the recompute-only run above memory.cap_gb = ${cap} succeeded:\n${out}")
endif()
require_in("${out}${err}" "memory.offload_experts = true" "the capped run's advice")

run_checked(${EXAMOE} ${DECK} ${ARGS} ${args_offload} --set memory.cap_gb=${cap}
            --set output.run_dir=${WORK}/offload_capped)

execute_process(COMMAND ${EXAMOE} ${DECK} ${ARGS} ${args_full} --set memory.cap_gb=${cap} --check
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "--check failed (${rc}):\n${out}${err}")
endif()
if(NOT out MATCHES "memory.offload_experts = true[^\n]* would fit")
  message(FATAL_ERROR "--check names no offload policy that fits:\n${out}")
endif()
