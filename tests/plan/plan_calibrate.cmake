# examoe-plan calibrate on NP ranks in pretend nodes of RPN writes a cluster
# file examoe-plan reads back, with the nodes and devices it ran on and
# both links measured.
#   -DPLAN -DMPIEXEC -DNP -DRPN -DOUT
file(REMOVE ${OUT})
execute_process(COMMAND ${MPIEXEC} -n ${NP} ${PLAN} calibrate --out ${OUT} --ranks-per-node ${RPN}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "calibrate failed (${rc}):\n${out}")
endif()
message(STATUS "${out}")
file(READ ${OUT} text)
math(EXPR nodes "${NP} / ${RPN}")
foreach(want "nodes = ${nodes}\n" "devices_per_node = ${RPN}\n" "allreduce_gbs = [0-9]" "alltoall_gbs = [0-9]"
            "allreduce_large_gbs = [0-9]" "overlap = [0-9]")
  if(NOT text MATCHES "${want}")
    message(FATAL_ERROR "${OUT} lacks '${want}':\n${text}")
  endif()
endforeach()
# It loads, and plans.
execute_process(COMMAND ${PLAN} ${DECK} --cluster ${OUT} --top 1 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "1\\. dp")
  message(FATAL_ERROR "examoe-plan on the calibrated file failed (${rc}):\n${out}")
endif()
