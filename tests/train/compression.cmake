# Gradient and weight compression end to end: top-k (comm.compression =
# "topk") and the compression scope of hierarchical collectives.
#
#   cmake -DMPIEXEC=... -DNP_FLAG=... -DEXAMOE=... -DDECK=... -DWORK=... "-DARGS=..."
#         -DCASE=topk_ratio_one|topk_reshard|inter_node|hierarchical_weights|topk_growth[_ep4]|freeze_variance
#         -P compression.cmake
#
# topk_ratio_one: at dp 2, top-k with ratio 1 sends every value unchanged and
#   owes nothing, and two ranks' sums are the same in either order, so its
#   losses equal the uncompressed run's digit for digit, under ZeRO 0
#   (allgather) and ZeRO 2 (all-to-all). At the default ratio the log line
#   shows the gradients' wire bytes under 10% of fp32's.
# topk_reshard: a run at dp 4 checkpoints after step 3, with residuals in
#   it; a resume at dp 2 (twice the accumulation: the same global batch)
#   folds its 4 rows into 2 and halves them (the log says so), repeats step
#   4's loss (the model is the same) and trains on with finite losses.
# inter_node: see the case below.
# hierarchical_weights: comm.weight_compression over hierarchical ZeRO 3
#   gathers at dp 2. One node of two with compress_scope = "inter_node"
#   encodes nothing: the uncompressed hierarchical losses, digit for digit.
#   Nodes of one rank with compress_scope = "all": the gather is its
#   inter-node stage alone, so the losses are the flat int8 gathers', digit
#   for digit, and the log shows their 25.4%.
# topk_growth, topk_growth_ep4, freeze_variance: see the cases below.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})

function(run np dir)
  execute_process(COMMAND ${MPIEXEC} ${NP_FLAG} ${np} ${EXAMOE} ${DECK} ${ARGS} ${ARGN} --set output.run_dir=${dir}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "examoe failed (exit ${rc}):\n${out}\n${err}")
  endif()
  set(log "${out}${err}" PARENT_SCOPE)
endfunction()

# same_losses(<run dir a> <run dir b> <label a> <label b> <what>): the two
# runs' step losses, digit for digit, or a FATAL_ERROR saying `what`.
function(same_losses a b label_a label_b what)
  losses_of(${a}/metrics.jsonl la)
  losses_of(${b}/metrics.jsonl lb)
  message(STATUS "${label_a}: ${la}")
  message(STATUS "${label_b}: ${lb}")
  if(NOT la STREQUAL lb)
    message(FATAL_ERROR "${what}")
  endif()
endfunction()

if(CASE STREQUAL "topk_ratio_one")
  list(APPEND ARGS --set train.steps=4)
  foreach(zero 0 2)
    run(2 ${WORK}/none${zero} --set parallel.zero=${zero})
    run(2 ${WORK}/topk${zero} --set parallel.zero=${zero} --set comm.compression=topk --set comm.topk_ratio=1)
    same_losses(${WORK}/none${zero} ${WORK}/topk${zero} "zero ${zero}, none" "zero ${zero}, topk ratio 1"
                "zero ${zero}: top-k at ratio 1 does not repeat the uncompressed losses")
    # It did run top-k: 6 bytes a value on the wire, against fp32's 4.
    value_at(${WORK}/topk${zero} 1 wire comm dp_grads wire_bytes)
    value_at(${WORK}/topk${zero} 1 logical comm dp_grads logical_bytes)
    execute_process(COMMAND awk "BEGIN{exit !(${wire} > 1.4 * ${logical})}" RESULT_VARIABLE ok)
    if(NOT ok EQUAL 0)
      message(FATAL_ERROR "zero ${zero}: the ratio-1 run sent ${wire} bytes for ${logical}: not top-k's payload")
    endif()
  endforeach()
  run(2 ${WORK}/topk_default --set comm.compression=topk)
  if(NOT log MATCHES "[|] dp_grads wire [0-9][.][0-9]%")
    message(FATAL_ERROR "the default ratio's log line does not show gradient wire bytes under 10%:\n${log}")
  endif()
elseif(CASE STREQUAL "topk_reshard")
  set(topk --set comm.compression=topk --set comm.topk_ratio=0.05 --set train.steps=6 --set checkpoint.every=3)
  run(4 ${WORK}/dp4 ${topk} --set parallel.zero=1)
  file(MAKE_DIRECTORY ${WORK}/dp2)
  file(COPY ${WORK}/dp4/ckpt DESTINATION ${WORK}/dp2)
  file(REMOVE_RECURSE ${WORK}/dp2/ckpt/step_00000006)
  file(CREATE_LINK step_00000003 ${WORK}/dp2/ckpt/latest SYMBOLIC)
  run(2 ${WORK}/dp2 ${topk} --set parallel.zero=1 --set checkpoint.resume=true --set train.grad_accum=2)
  if(NOT log MATCHES "top-k residuals of 4 data-parallel ranks folded into 2 [(]scaled by 0[.]5[)]")
    message(FATAL_ERROR "the resume at dp 2 did not fold the dp 4 residuals:\n${log}")
  endif()
  losses_of(${WORK}/dp4/metrics.jsonl dp4)
  losses_of(${WORK}/dp2/metrics.jsonl dp2)
  message(STATUS "dp 4:              ${dp4}")
  message(STATUS "dp 2 from step 3:  ${dp2}")
  list(LENGTH dp2 n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "expected 3 step records after the resume, got ${n}")
  endif()
  list(GET dp4 3 a)
  list(GET dp2 0 b)
  string(REGEX REPLACE ".*:" "" a "${a}")
  string(REGEX REPLACE ".*:" "" b "${b}")
  require_close(${a} ${b} "step 4 at dp 4 and resumed at dp 2")
  foreach(rec IN LISTS dp2)
    if(NOT rec MATCHES ":[0-9]")
      message(FATAL_ERROR "a resumed step's loss is not finite: ${rec}")
    endif()
  endforeach()
elseif(CASE STREQUAL "inter_node")
  # comm.compress_scope = "inter_node": on one node (2 ranks) nothing is
  # encoded, so int8 and top-k repeat the uncompressed hierarchical losses
  # digit for digit; on two nodes of two (4 ranks) only the inter-node stage
  # is, so the gradients' wire bytes fall between int8's 25.4% and fp32's.
  list(APPEND ARGS --set train.steps=2 --set parallel.hierarchical=true)
  run(2 ${WORK}/dense --set parallel.ranks_per_node=2)
  foreach(mode int8 topk)
    run(2 ${WORK}/one_node_${mode} --set parallel.ranks_per_node=2 --set comm.compression=${mode}
        --set comm.compress_scope=inter_node)
    same_losses(${WORK}/dense ${WORK}/one_node_${mode} "one node, dense" "one node, ${mode}"
                "one node with ${mode} on the inter-node stage only does not repeat the dense losses")
  endforeach()
  run(4 ${WORK}/two_nodes --set parallel.ranks_per_node=2 --set comm.compression=int8
      --set comm.compress_scope=inter_node)
  if(NOT log MATCHES "step +2/2 .*[|] dp_grads wire ([3-9][0-9])[.][0-9]%")
    message(FATAL_ERROR "two nodes: the gradients' wire bytes are not between int8's and fp32's:\n${log}")
  endif()
  message(STATUS "two nodes of two, int8 between them: dp_grads wire ${CMAKE_MATCH_1}%")
elseif(CASE STREQUAL "hierarchical_weights")
  list(APPEND ARGS --set train.steps=2 --set parallel.zero=3)
  set(hier --set parallel.hierarchical=true)
  run(2 ${WORK}/one_node_dense ${hier} --set parallel.ranks_per_node=2)
  run(2 ${WORK}/one_node_int8 ${hier} --set parallel.ranks_per_node=2 --set comm.weight_compression=int8
      --set comm.compress_scope=inter_node)
  same_losses(${WORK}/one_node_dense ${WORK}/one_node_int8 "one node, dense" "one node, int8 weights inter-node"
              "one node with int8 weight gathers on the inter-node stage only does not repeat the dense losses")
  run(2 ${WORK}/flat_int8 --set comm.weight_compression=int8)
  run(2 ${WORK}/one_a_node_int8 ${hier} --set parallel.ranks_per_node=1 --set comm.weight_compression=int8)
  if(NOT log MATCHES "step +2/2 .*[|] zero_weights wire 25[.]4%")
    message(FATAL_ERROR "nodes of one rank: the weight gathers' wire bytes are not int8's 25.4%:\n${log}")
  endif()
  same_losses(${WORK}/flat_int8 ${WORK}/one_a_node_int8 "flat, int8 weights" "nodes of one rank, int8 weights"
              "hierarchical int8 weight gathers over nodes of one rank do not repeat the flat ones' losses")
elseif(CASE MATCHES "^topk_growth")
  # Expert growth after step 2 (4 -> 6 experts) under top-k at ratio 0.05:
  # the residuals carried to the grown model hold every owed value (the
  # checksums of the residuals' bits over the world agree, and are not
  # zero). At 2 ranks dp 2 (the experts' residuals on both ranks whole)
  # and dp 2 x ep 2 (the router's rows move, the experts' groups are one
  # rank: no residual); at 4 ranks dp 4 x ep 2, where the experts' rows
  # move between ranks.
  set(grow --set comm.compression=topk --set comm.topk_ratio=0.05 --set growth.every=2 --set growth.add=2
      --set growth.max_experts=8 --set train.steps=3)
  set(runs "1")
  if(CASE STREQUAL "topk_growth")
    set(np 2)
    set(runs "1;2")
  else()
    set(np 4)
    set(runs "2")
  endif()
  foreach(ep IN LISTS runs)
    run(${np} ${WORK}/ep${ep} ${grow} --set parallel.ep=${ep})
    if(NOT log MATCHES "checksum ([0-9a-f]+) before, ([0-9a-f]+) after")
      message(FATAL_ERROR "ep ${ep}: no top-k residual line at the growth event:\n${log}")
    endif()
    if(NOT CMAKE_MATCH_1 STREQUAL CMAKE_MATCH_2 OR CMAKE_MATCH_1 STREQUAL "0000000000000000")
      message(FATAL_ERROR "ep ${ep}: the residuals' checksum went from ${CMAKE_MATCH_1} to ${CMAKE_MATCH_2} at growth")
    endif()
    message(STATUS "${np} ranks, ep ${ep}: residual checksum ${CMAKE_MATCH_1} before and after the growth event")
  endforeach()
elseif(CASE STREQUAL "freeze_variance")
  # optim.freeze_variance_step = 2 with top-k after 2 dense steps (1-bit
  # Adam's recipe): updates 1 and 2 are AdamW's, so the losses of steps 1 to
  # 3 are the unfrozen run's digit for digit; update 3 keeps the second
  # moment, so step 4's loss differs.
  set(topk --set comm.compression=topk --set comm.topk_ratio=0.05 --set comm.topk_warmup=2 --set train.steps=4)
  run(2 ${WORK}/live ${topk})
  run(2 ${WORK}/frozen ${topk} --set optim.freeze_variance_step=2)
  losses_of(${WORK}/live/metrics.jsonl live)
  losses_of(${WORK}/frozen/metrics.jsonl frozen)
  message(STATUS "v live:          ${live}")
  message(STATUS "v frozen after 2: ${frozen}")
  list(LENGTH frozen n)
  if(NOT n EQUAL 4)
    message(FATAL_ERROR "expected 4 step records, got ${n}")
  endif()
  list(SUBLIST live 0 3 live_before)
  list(SUBLIST frozen 0 3 frozen_before)
  if(NOT live_before STREQUAL frozen_before)
    message(FATAL_ERROR "steps 1 to 3 differ before the freeze could act")
  endif()
  list(GET live 3 a)
  list(GET frozen 3 b)
  if(a STREQUAL b)
    message(FATAL_ERROR "step 4's loss is the same with the second moment frozen: the key did not reach AdamW")
  endif()
else()
  message(FATAL_ERROR "CASE must be topk_ratio_one, topk_reshard, inter_node, hierarchical_weights, topk_growth, "
                      "topk_growth_ep4 or freeze_variance")
endif()
