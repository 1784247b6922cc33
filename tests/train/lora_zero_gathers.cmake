# LoRA under ZeRO 1: after each step only the adapters' working copies
# are gathered again (the frozen model's never change), so the ZeRO weight
# traffic of a step is a small fraction of full training's on the same
# layout. Before the frozen engines were left out it was all of it.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(common ${DECK} ${ARGS} --set train.steps=3 --set checkpoint.every=0 --set parallel.zero=1)
run_checked(${EXAMOE} ${common} --set output.run_dir=${WORK}/full)
run_checked(${EXAMOE} ${common} --set lora.rank=4 --set lora.targets=attention --set output.run_dir=${WORK}/lora)
value_at(${WORK}/full 3 full comm zero_weights logical_bytes)
value_at(${WORK}/lora 3 lora comm zero_weights logical_bytes)
message(STATUS "ZeRO 1 weight gathers at step 3: full training ${full} B, LoRA ${lora} B")
if(full STREQUAL "" OR lora STREQUAL "")
  message(FATAL_ERROR "no step-3 zero_weights record in ${WORK}/*/metrics.jsonl")
endif()
execute_process(COMMAND awk "BEGIN{exit !(${full} > 0 && ${lora} < 0.1 * ${full})}" RESULT_VARIABLE ok)
if(NOT ok EQUAL 0)
  message(FATAL_ERROR "LoRA gathered ${lora} B of weights at step 3 against full training's ${full} B: the frozen "
                      "model's working copies are gathered again")
endif()
