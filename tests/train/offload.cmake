# memory.offload_experts against a resident run on one rank: the same step
# records (loss, gradient norm, validation loss) digit for digit, since
# offload moves pages and never changes the arithmetic; and the measured
# peak of the experts' values resident in the process (pagemap samples at
# every layer boundary and optimizer piece, the run's closing "expert
# offload:" line) at most
#   (experts a layer used) x (one expert's bytes) x (prefetch depth)
# plus what page granularity adds: a read fault maps the cached pages of
# its 64 KiB-aligned window too (the kernel's fault-around), so each of a
# resident layer's three expert tensors may bring up to two windows more;
# and below the whole offloaded size.
# On a CUDA build (-DHOST_MEMORY_TIER=ON) the tier is host memory, there is
# no file and no directory to name, and the peak is of the experts'
# values prefetched to the GPU.
#   -DEXAMOE=... -DDECK=... -DWORK=... -DARGS="..." [-DHOST_MEMORY_TIER=ON]
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/tier)
set(on --set memory.offload_experts=true)
if(NOT HOST_MEMORY_TIER)
  list(APPEND on --set memory.offload_dir=${WORK}/tier)
endif()
set(cases "resident;depth1;depth2")
set(args_resident "")
set(args_depth1 ${on} --set memory.offload_prefetch=1 --set memory.offload_optimizer=true)
set(args_depth2 ${on} --set memory.offload_prefetch=2)
foreach(c IN LISTS cases)
  execute_process(COMMAND ${EXAMOE} ${DECK} ${ARGS} ${args_${c}} --set output.run_dir=${WORK}/${c}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out_${c} ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the ${c} run failed (${rc}):\n${out_${c}}\n${err}")
  endif()
  losses_of(${WORK}/${c}/metrics.jsonl loss_${c})
  values_of(${WORK}/${c}/metrics.jsonl norm_${c} grad_norm)
  values_of(${WORK}/${c}/metrics.jsonl val_${c} val_loss)
endforeach()
list(LENGTH loss_resident n)
if(n EQUAL 0)
  message(FATAL_ERROR "the runs logged no steps")
endif()
foreach(c depth1 depth2)
  foreach(what loss norm val)
    if(NOT "${${what}_resident}" STREQUAL "${${what}_${c}}")
      message(FATAL_ERROR "offload (${c}) changed the ${what}: ${${what}_resident} vs ${${what}_${c}}")
    endif()
  endforeach()
  string(REGEX MATCH "expert offload: peak resident MiB[^\n]*" line "${out_${c}}")
  if(line STREQUAL "")
    message(FATAL_ERROR "the ${c} run printed no \"expert offload:\" line:\n${out_${c}}")
  endif()
  message(STATUS "${c}: ${line}")
  string(REGEX MATCH "params ([0-9.]+) of ([0-9.]+)" m "${line}")
  set(peak ${CMAKE_MATCH_1})
  set(total ${CMAKE_MATCH_2})
  string(REGEX MATCH "one expert ([0-9.]+) MiB, at most ([0-9]+) used by a layer, prefetch depth ([0-9]+)" m "${line}")
  set(expert ${CMAKE_MATCH_1})
  set(used ${CMAKE_MATCH_2})
  set(depth ${CMAKE_MATCH_3})
  if(peak STREQUAL "" OR expert STREQUAL "")
    message(FATAL_ERROR "cannot read the ${c} run's offload line: ${line}")
  endif()
  # The line rounds to 0.01 MiB (peak, total) and 0.001 MiB (expert).
  set(bound "${used} * (${expert} + 0.0005) * ${depth} + (${depth} + 1) * 3 * 2 * 65536 / 1048576 + 0.005")
  execute_process(COMMAND awk "BEGIN{exit !(${peak} <= ${bound} && ${peak} < ${total})}" RESULT_VARIABLE ok)
  if(NOT ok EQUAL 0)
    message(FATAL_ERROR "${c}: ${peak} MiB of expert values resident at the peak, above ${bound} or not below "
                        "the ${total} MiB offloaded")
  endif()
  file(GLOB left ${WORK}/tier/*)
  if(left)
    message(FATAL_ERROR "the ${c} run left its offload file behind: ${left}")
  endif()
endforeach()
