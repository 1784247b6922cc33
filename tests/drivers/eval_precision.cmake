# `examoe eval` of a checkpoint trained with bf16 products runs in bf16 (the
# training run's precision) and says so in its JSON line.
#   -DEXAMOE=... -DSRC=... -DWORK=...
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${EXAMOE} ${SRC}/input/tiny.toml --set model.d_model=32 --set model.n_layers=2
                        --set train.steps=2 --set checkpoint.every=2 --set train.eval_every=0
                        --set precision.compute=bf16 --set output.run_dir=${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the bf16 run failed (exit ${rc}):\n${out}\n${err}")
endif()
# The corpus' first 20 kB are enough text to evaluate.
file(READ ${SRC}/data/corpus.txt head LIMIT 20000)
file(WRITE ${WORK}/head.txt "${head}")
execute_process(COMMAND ${EXAMOE} eval --checkpoint ${WORK}/ckpt/step_00000002 --tokens ${WORK}/head.txt --batch 4
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "examoe eval of the bf16 checkpoint failed (exit ${rc}):\n${out}\n${err}")
endif()
string(REGEX MATCH "{[^\n]*}" json "${out}")
string(JSON matmuls GET "${json}" matmuls)
string(JSON ce GET "${json}" ce_nats_per_token)
message(STATUS "eval: ${json}")
if(NOT matmuls STREQUAL "bf16")
  message(FATAL_ERROR "the evaluation of a bf16 run's checkpoint ran its products in ${matmuls}")
endif()
