# `examoe eval` of a checkpoint taken right at an expert-growth event (split,
# noise 0: each clone's router row still equals its parent's) builds the
# grown model and routes with its clone families, so its cross-entropy is
# the un-grown model's at that step to 1e-6; routing without the families
# would give clones and parents two slots of a token's top-k.
#   -DEXAMOE=... -DSRC=... -DWORK=...
file(REMOVE_RECURSE ${WORK})
set(common ${SRC}/input/tiny.toml --set model.d_model=32 --set model.n_layers=2 --set model.seq_len=32
           --set moe.d_expert=32 --set train.steps=2 --set checkpoint.every=2 --set train.eval_every=0)
foreach(run static grown)
  set(extra "")
  if(run STREQUAL "grown")
    set(extra --set growth.every=2 --set growth.add=4 --set growth.max_experts=12)
  endif()
  execute_process(COMMAND ${EXAMOE} ${common} ${extra} --set output.run_dir=${WORK}/${run}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the ${run} run failed (exit ${rc}):\n${out}\n${err}")
  endif()
endforeach()
file(READ ${SRC}/data/corpus.txt head LIMIT 20000)
file(WRITE ${WORK}/head.txt "${head}")
foreach(run static grown)
  execute_process(COMMAND ${EXAMOE} eval --checkpoint ${WORK}/${run} --tokens ${WORK}/head.txt --batch 4
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "examoe eval of the ${run} checkpoint failed (exit ${rc}):\n${out}\n${err}")
  endif()
  string(REGEX MATCH "{[^\n]*}" json "${out}")
  string(JSON ce_${run} GET "${json}" ce_nats_per_token)
  message(STATUS "${run}: ${json}")
endforeach()
execute_process(COMMAND awk "BEGIN{a=${ce_static};b=${ce_grown};d=a-b;if(d<0)d=-d;exit !(d<=1e-6*a)}"
                RESULT_VARIABLE ok)
if(NOT ok EQUAL 0)
  message(FATAL_ERROR "the grown checkpoint evaluates to ${ce_grown}, the un-grown one to ${ce_static}")
endif()
