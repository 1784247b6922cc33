# parallel.auto: the planner chooses the layout of NP launched ranks, the
# run trains with it, and the start record says who chose it.
#   -DEXAMOE -DMPIEXEC -DNP -DWORK "-DARGS=<deck and --set>"
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${MPIEXEC} -n ${NP} ${EXAMOE} ${ARGS} --set parallel.auto=true --set train.steps=2
                        --set output.run_dir=${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the run failed (${rc}):\n${out}")
endif()
string(REGEX MATCH "parallel\\.auto: [^\n]*" chose "${out}")
if(chose STREQUAL "")
  message(FATAL_ERROR "the log does not say what parallel.auto chose:\n${out}")
endif()
message(STATUS "${chose}")
file(STRINGS ${WORK}/metrics.jsonl lines LIMIT_COUNT 1)
string(JSON by GET "${lines}" layout chosen_by)
if(NOT by MATCHES "^parallel.auto on ")
  message(FATAL_ERROR "the start record's layout.chosen_by is '${by}'")
endif()
