# The single-rank reference for the data-parallel equivalence tests: 4
# micro-batches of 2 sequences per step.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
run_checked(${EXAMOE} ${ARGS} --set train.grad_accum=4 --set output.run_dir=${WORK})
