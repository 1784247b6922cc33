# A checkpoint of a [[data.streams]] run rebuilds its model for inference
# (its stored deck holds the streams; the stored configuration leaves the
# unused data.path and data.format out): `examoe eval` on one stream's file.
#   -DEXAMOE -DWORK -DDECK -DLEGAL
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${EXAMOE} ${DECK} --set model.d_model=32 --set model.n_layers=1 --set model.seq_len=32
                        --set train.steps=2 --set train.micro_batch=2 --set train.grad_accum=2 --set train.eval_every=0
                        --set checkpoint.every=2 --set output.run_dir=${WORK}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the streams run failed (${rc}):\n${out}")
endif()
execute_process(COMMAND ${EXAMOE} eval --checkpoint ${WORK} --tokens ${LEGAL}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "ce_nats_per_token")
  message(FATAL_ERROR "examoe eval on the streams run's checkpoint failed (${rc}):\n${out}${err}")
endif()
if(err MATCHES "does not know")
  message(FATAL_ERROR "examoe eval warned about the stored configuration:\n${err}")
endif()
message(STATUS "examoe eval read the streams run's checkpoint: ${out}")
