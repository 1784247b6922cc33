# Work runs inside the expert all-to-all in parts: at moe.a2a_chunks = 2
# the step records' time.all_to_all_overlapped (the regions moe/overlapped:
# the shared experts' products while the first part travels, and the
# experts' weight gradients while each part's input gradients travel) is
# positive, and at moe.a2a_chunks = 1 (one blocking exchange: nothing to
# overlap) it is 0. ARGS with or without shared experts.
#   -DEXAMOE -DMPIEXEC -DWORK "-DARGS=..."
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
foreach(chunks 1 2)
  run_checked(${MPIEXEC} -n 2 ${EXAMOE} ${ARGS} --set moe.a2a_chunks=${chunks}
              --set output.run_dir=${WORK}/chunks${chunks})
  value_at(${WORK}/chunks${chunks} 2 t time all_to_all_overlapped)
  if(t STREQUAL "")
    message(FATAL_ERROR "chunks ${chunks}: no step-2 record with time.all_to_all_overlapped")
  endif()
  message(STATUS "moe.a2a_chunks = ${chunks}: all_to_all_overlapped ${t} s per step")
  set(t_${chunks} ${t})
endforeach()
require_abs("${t_1}" "<=" 0 "the blocking exchange's overlapped time")
execute_process(COMMAND awk "BEGIN{exit !(${t_2} > 0)}" RESULT_VARIABLE ok)
if(NOT ok EQUAL 0)
  message(FATAL_ERROR "moe.a2a_chunks = 2 ran nothing inside the exchange (${t_2} s)")
endif()
