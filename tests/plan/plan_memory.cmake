# The planner's parameter, gradient and optimizer bytes equal the memory
# ledger's (metrics.jsonl "mem", rank 0: pipeline stage 0, tensor part 0,
# EP rank 0, ZeRO part 0) for one layout, exactly, and its activations
# within 10%:
#   -DEXAMOE -DPLAN -DMPIEXEC -DNP -DCLUSTER -DWORK "-DARGS=<deck and --set>"
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${MPIEXEC} -n ${NP} ${EXAMOE} ${ARGS} --set train.steps=1 --set train.log_every=1
                        --set output.run_dir=${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the run failed (${rc}):\n${out}")
endif()
execute_process(COMMAND ${PLAN} ${ARGS} --cluster ${CLUSTER} --ranks ${NP} --predict --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE pred ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "examoe-plan --predict failed (${rc}):\n${pred}${err}")
endif()
file(STRINGS ${WORK}/metrics.jsonl lines)
set(record "")
foreach(line IN LISTS lines)
  string(JSON m ERROR_VARIABLE none GET "${line}" mem)
  if(none STREQUAL "NOTFOUND")
    set(record "${line}")
  endif()
endforeach()
if(record STREQUAL "")
  message(FATAL_ERROR "${WORK}/metrics.jsonl has no record with \"mem\"")
endif()
string(JSON flops GET "${pred}" flops_per_token)
string(JSON train_flops GET "${pred}" train_flops_per_token)
if(NOT flops STREQUAL train_flops)
  message(FATAL_ERROR "the planner's FLOPs per token ${flops} differ from the model's count ${train_flops}")
endif()
foreach(cat parameters gradients optimizer)
  string(JSON measured GET "${record}" mem ${cat} current)
  string(JSON predicted GET "${pred}" stage_memory 0 ${cat})
  # Both are whole byte counts; the prediction prints as a double.
  execute_process(COMMAND awk "BEGIN{exit !(${measured} == ${predicted})}" RESULT_VARIABLE same)
  message(STATUS "${cat}: ledger ${measured} B, planner ${predicted} B")
  if(NOT same EQUAL 0)
    message(FATAL_ERROR "${cat}: the memory ledger has ${measured} B on rank 0, the planner predicts ${predicted} B "
                        "(${ARGS}, ${NP} ranks)")
  endif()
endforeach()
# Activations (the contexts, the backward's scratch): the ledger's peak
# over the step, within 10% of the prediction.
string(JSON measured GET "${record}" mem activations peak)
string(JSON predicted GET "${pred}" stage_memory 0 activations)
execute_process(COMMAND awk "BEGIN{r=(${predicted} - ${measured}) / ${measured}; printf \"%.4f\", r}"
                OUTPUT_VARIABLE rel)
message(STATUS "activations: ledger peak ${measured} B, planner ${predicted} B (${rel} relative)")
execute_process(COMMAND awk "BEGIN{r=${rel}; if(r<0)r=-r; exit !(r <= 0.10)}" RESULT_VARIABLE close)
if(NOT close EQUAL 0)
  message(FATAL_ERROR "activations: the planner predicts ${predicted} B, the ledger's peak on rank 0 is ${measured} B "
                      "(${rel} relative, more than 10%; ${ARGS}, ${NP} ranks)")
endif()
