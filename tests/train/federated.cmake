# Federated training end to end (train/federated.hpp).
#   MODE=secure_plain: three sites on three ranks, site 1 dropping out of
#     round 2, by secure aggregation and by plain averaging of the same
#     fixed-point values: every site's losses are the same bit for bit (the
#     secure sum is the plain sum of the survivors), round 2's records say
#     site 1 was left out, and the secure rounds moved more bytes than plain.
#   MODE=layout: two sites of one rank against two sites of two ranks each
#     (tp 2 + sequence parallelism): the same per-site losses (1e-5), as a
#     site's layout does not change what it trains.
#   MODE=offload: two sites of one rank, with the routed experts and their
#     optimizer state offloaded (memory.offload_experts) and without: the
#     same losses bit for bit, as the average reads and writes the
#     offloaded values like the others.
#   -DEXAMOE -DMPIEXEC -DWORK -DARGS -DSITES2 -DSITES3 (site_data values)
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})

function(run np tag)
  run_checked(${MPIEXEC} -n ${np} ${EXAMOE} ${ARGS} ${ARGN} --set output.run_dir=${WORK}/${tag})
endfunction()

# The federated_round records of a site's run, in order.
function(round_records dir out)
  file(STRINGS ${dir}/metrics.jsonl all REGEX "\"event\":\"federated_round\"")
  set(${out} "${all}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "secure_plain")
  set(fed --set federated.sites=3 --set federated.site_data=${SITES3} --set federated.drop=1:2)
  run(3 secure ${fed} --set federated.secure=true --set federated.threshold=2)
  run(3 plain ${fed} --set federated.secure=false)
  set(LOSS_TOL 0)
  foreach(k 0 1 2)
    compare_steps(${WORK}/plain/site${k}/metrics.jsonl ${WORK}/secure/site${k}/metrics.jsonl 4 "secure site ${k}")
    round_records(${WORK}/secure/site${k} recs)
    list(LENGTH recs n)
    if(NOT n EQUAL 2)
      message(FATAL_ERROR "site ${k}: ${n} federated_round records, want 2 (4 steps, rounds of 2)")
    endif()
    list(GET recs 0 r1)
    list(GET recs 1 r2)
    string(JSON kept1 GET "${r1}" kept)
    string(JSON kept2 GET "${r2}" kept)
    string(REGEX REPLACE "[ \n]" "" kept1 "${kept1}")
    string(REGEX REPLACE "[ \n]" "" kept2 "${kept2}")
    if(NOT kept1 STREQUAL "[1,1,1]" OR NOT kept2 STREQUAL "[1,0,1]")
      message(FATAL_ERROR "site ${k}: rounds kept ${kept1} and ${kept2}, want [1,1,1] and [1,0,1] (site 1 dropped "
                          "out of round 2)")
    endif()
    string(JSON bytes GET "${r1}" bytes)
    string(JSON plain GET "${r1}" plain_bytes)
    if(NOT bytes GREATER plain)
      message(FATAL_ERROR "site ${k}: secure aggregation moved ${bytes} bytes, no more than plain's ${plain}")
    endif()
    string(JSON val GET "${r2}" val_global)
    message(STATUS "site ${k}: rounds kept ${kept1} ${kept2}; ${bytes} bytes against ${plain} plain; global val ${val}")
  endforeach()
elseif(MODE STREQUAL "layout")
  set(fed --set federated.sites=2 --set federated.site_data=${SITES2})
  run(2 one_rank ${fed})
  run(4 tp2 ${fed} --set parallel.tp=2 --set parallel.sequence_parallel=true)
  foreach(k 0 1)
    compare_steps(${WORK}/one_rank/site${k}/metrics.jsonl ${WORK}/tp2/site${k}/metrics.jsonl 4 "tp2 site ${k}")
  endforeach()
elseif(MODE STREQUAL "offload")
  set(fed --set federated.sites=2 --set federated.site_data=${SITES2})
  run(2 resident ${fed})
  run(2 offloaded ${fed} --set memory.offload_experts=true --set memory.offload_optimizer=true)
  set(LOSS_TOL 0)
  foreach(k 0 1)
    compare_steps(${WORK}/resident/site${k}/metrics.jsonl ${WORK}/offloaded/site${k}/metrics.jsonl 4 "offloaded site ${k}")
    ledger_peak_sum(${WORK}/offloaded/site${k} 4 paged offload)
    if(NOT paged GREATER 0)
      message(FATAL_ERROR "site ${k}: no offloaded bytes resident at any time: nothing was offloaded")
    endif()
    round_records(${WORK}/resident/site${k} a)
    round_records(${WORK}/offloaded/site${k} b)
    list(GET a 1 ra)
    list(GET b 1 rb)
    string(JSON va GET "${ra}" val_global)
    string(JSON vb GET "${rb}" val_global)
    if(NOT va STREQUAL vb)
      message(FATAL_ERROR "site ${k}: round 2's global validation loss ${vb} offloaded against ${va}")
    endif()
  endforeach()
else()
  message(FATAL_ERROR "federated.cmake: MODE must be secure_plain, layout or offload, not '${MODE}'")
endif()
