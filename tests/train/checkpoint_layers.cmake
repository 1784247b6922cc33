# memory.checkpoint_layers = "sqrt" under full recompute keeps the inputs of
# ceil(L/N) segment starts plus N - 1 shared segment buffers (N =
# ceil(sqrt(L))): O(sqrt(L)) inputs where "all" keeps L. The runs' own
# activation bytes differ by exactly (L - ceil(L/N) - N + 1) inputs of
# XBYTES each (every other buffer is the same in both), checked for
# L = 4, 9, 16, 25; and the losses are the same digit for digit.
#   -DEXAMOE=... -DDECK=... -DWORK=... -DARGS="..." -DXBYTES=<bytes of one layer input>
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
foreach(L 4 9 16 25)
  foreach(cl all sqrt)
    run_checked(${EXAMOE} ${DECK} ${ARGS} --set model.n_layers=${L} --set memory.recompute=full
                --set memory.checkpoint_layers=${cl} --set output.run_dir=${WORK}/${L}_${cl})
    losses_of(${WORK}/${L}_${cl}/metrics.jsonl loss_${cl})
    values_of(${WORK}/${L}_${cl}/metrics.jsonl act memory activations)
    list(GET act -1 act)
    string(REGEX REPLACE ".*:([0-9]+).*" "\\1" act_${cl} "${act}")
  endforeach()
  if(NOT "${loss_all}" STREQUAL "${loss_sqrt}")
    message(FATAL_ERROR "L = ${L}: checkpoint_layers = sqrt changed the losses: ${loss_all} vs ${loss_sqrt}")
  endif()
  set(n 1)
  set(sq 1)
  while(sq LESS L)
    math(EXPR n "${n} + 1")
    math(EXPR sq "${n} * ${n}")
  endwhile()
  math(EXPR kept "(${L} + ${n} - 1) / ${n} + ${n} - 1")
  math(EXPR want "(${L} - ${kept}) * ${XBYTES}")
  math(EXPR got "${act_all} - ${act_sqrt}")
  message(STATUS "L = ${L}: N = ${n}, ${kept} inputs kept instead of ${L}; all ${act_all} B, sqrt ${act_sqrt} B")
  if(NOT got EQUAL want)
    message(FATAL_ERROR "L = ${L}: sqrt saves ${got} bytes against all, expected ${want} "
                        "(${L} - ${kept} inputs of ${XBYTES} bytes)")
  endif()
endforeach()
