# Checkpoints across ZeRO stages and data-parallel sizes: a run in one layout
# (WRITER: "np zero [extra...]") is killed after its step-3 checkpoint; runs
# in other layouts (READERS: "np zero [extra...]|np zero ...") resume from a
# copy of it and must log the single-rank reference's losses at steps 4 and 5
# (1e-5 relative). Every run takes micro-batches of 2 sequences, global
# batch 8, like the reference (train.dp_reference).
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})

include(${CMAKE_CURRENT_LIST_DIR}/model_parallel_ranks.cmake)

# layout_args(<"np zero [--set ...]"> <np-out> <args-out>)
function(layout_args spec np_out args_out)
  separate_arguments(spec)
  list(POP_FRONT spec np zero)
  model_parallel_ranks("${spec}" mp_ranks)  # ranks that share micro-batches
  math(EXPR accum "4 * ${mp_ranks} / ${np}")
  set(${np_out} ${np} PARENT_SCOPE)
  set(${args_out} --set parallel.zero=${zero} --set train.grad_accum=${accum} ${spec} PARENT_SCOPE)
endfunction()

layout_args("${WRITER}" np wargs)
set(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP} 3)
execute_process(COMMAND ${MPIEXEC} -n ${np} ${EXAMOE} ${ARGS} ${wargs} --set checkpoint.every=3
                        --set output.run_dir=${WORK}/writer
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
unset(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP})
if(rc EQUAL 0 OR NOT EXISTS ${WORK}/writer/ckpt/step_00000003)
  file(GLOB found ${WORK}/writer/ckpt/*)
  message(FATAL_ERROR "the writer (${WRITER}) should have stopped after its step-3 checkpoint (exit ${rc}, "
                      "checkpoints: ${found}):\n${out}\n${err}")
endif()

# The checkpoint names the writer's model-parallel sizes (examoe-ckpt inspect).
get_filename_component(bin ${EXAMOE} DIRECTORY)
execute_process(COMMAND ${bin}/examoe-ckpt inspect ${WORK}/writer/ckpt/step_00000003
                RESULT_VARIABLE rc OUTPUT_VARIABLE info ERROR_VARIABLE err)
foreach(dim tp cp)
  set(want 1)
  if(WRITER MATCHES "parallel\\.${dim}=([0-9]+)")
    set(want ${CMAKE_MATCH_1})
  endif()
  if(NOT rc EQUAL 0 OR NOT info MATCHES "\"${dim}\":${want}[,}]")
    message(FATAL_ERROR "the writer (${WRITER}) ran at ${dim} = ${want} but examoe-ckpt inspect (exit ${rc}) "
                        "says:\n${info}${err}")
  endif()
endforeach()

string(REPLACE "|" ";" readers "${READERS}")
set(i 0)
foreach(reader IN LISTS readers)
  layout_args("${reader}" np rargs)
  set(dir ${WORK}/reader${i})
  file(MAKE_DIRECTORY ${dir})
  file(COPY ${WORK}/writer/ckpt DESTINATION ${dir})
  run_checked(${MPIEXEC} -n ${np} ${EXAMOE} ${ARGS} ${rargs} --set checkpoint.every=3 --set checkpoint.resume=true
              --set output.run_dir=${dir})
  compare_steps(${REF}/metrics.jsonl ${dir}/metrics.jsonl 2 "written by (${WRITER}), resumed as (${reader})")
  math(EXPR i "${i} + 1")
endforeach()
