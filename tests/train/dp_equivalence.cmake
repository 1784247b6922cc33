include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
# EXTRA: further arguments for the 2-rank run only (e.g. the hierarchical
# allreduce); the single-rank run stays the plain reference.
separate_arguments(EXTRA)
file(REMOVE_RECURSE ${WORK})
set(common ${DECK} ${ARGS} --set train.steps=4 --set checkpoint.every=0 --set train.eval_every=0)
# Global batch 4 either way, in micro-batches of 2 sequences: 1 rank
# accumulating 2 micro-batches, or 2 ranks with one each. The micro-batch
# size stays fixed because the MoE aux/z losses and expert capacity are per
# micro-batch (as in Megatron-LM and DeepSpeed), so they are only
# layout-invariant at equal micro-batch composition.
run_checked(${EXAMOE} ${common} --set train.micro_batch=2 --set train.grad_accum=2 --set output.run_dir=${WORK}/np1)
run_checked(${MPIEXEC} -n 2 ${EXAMOE} ${common} --set train.micro_batch=2 ${EXTRA} --set output.run_dir=${WORK}/np2)
losses_of(${WORK}/np1/metrics.jsonl one)
losses_of(${WORK}/np2/metrics.jsonl two)
message(STATUS "1 rank : ${one}")
message(STATUS "2 ranks: ${two}   (extra: ${EXTRA})")
list(LENGTH one n1)
list(LENGTH two n2)
if(NOT n1 EQUAL 4 OR NOT n2 EQUAL 4)
  message(FATAL_ERROR "expected 4 step records each, got ${n1} and ${n2}")
endif()
foreach(i RANGE 3)
  list(GET one ${i} a)
  list(GET two ${i} b)
  string(REGEX REPLACE ".*:" "" a "${a}")
  string(REGEX REPLACE ".*:" "" b "${b}")
  # |a-b| <= 1e-5 |a|: CMake has no floating-point arithmetic, awk does.
  execute_process(COMMAND awk "BEGIN{a=${a};b=${b};d=a-b;if(d<0)d=-d;m=(a<0?-a:a);exit !(d<=1e-5*m)}"
                  RESULT_VARIABLE ok)
  if(NOT ok EQUAL 0)
    message(FATAL_ERROR "step ${i}: 1 rank loss ${a} vs 2 ranks ${b} differ by more than 1e-5 relative")
  endif()
endforeach()
