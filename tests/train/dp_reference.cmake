# The single-rank reference for the data-parallel equivalence tests: 4
# micro-batches of 2 sequences per step. ACCUM (default 4) sets the
# micro-batches for a reference that runs on several ranks itself (EXAMOE
# then starts with the launcher), so that its global batch stays 8.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
if(NOT DEFINED ACCUM)
  set(ACCUM 4)
endif()
file(REMOVE_RECURSE ${WORK})
run_checked(${EXAMOE} ${ARGS} --set train.grad_accum=${ACCUM} --set output.run_dir=${WORK})
