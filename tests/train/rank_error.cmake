# An error on one rank alone mid-run (fault injection: world rank 1 throws
# after step 2) ends the whole job at once with exit 1, and the error, named
# with its rank, is in the run directory's error.rank1.log (and on stderr,
# which the launcher's teardown may cut short, so it is not required): the
# other rank, waiting in the next step's collectives, does not hang until
# resilience.timeout_s (left at its 600 s default; the TIMEOUT below only
# guards against such a hang).
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(ENV{EXAMOE_FAULT_THROW_AFTER_STEP} 2)
set(ENV{EXAMOE_FAULT_RANK} 1)
execute_process(COMMAND ${MPIEXEC} -n 2 ${EXAMOE} ${DECK} ${ARGS} --set train.steps=8 --set checkpoint.every=0
                        --set train.eval_every=0 --set output.run_dir=${WORK}/run
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
set(all "${out}\n${err}")
message(STATUS "exit ${rc}; stderr:\n${err}")
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "the job exited with '${rc}', not 1 (a hang shows as a timeout here)")
endif()
if(NOT EXISTS ${WORK}/run/error.rank1.log)
  message(FATAL_ERROR "rank 1 left no ${WORK}/run/error.rank1.log")
endif()
file(READ ${WORK}/run/error.rank1.log line)
if(NOT line MATCHES "^examoe: error: \\(rank 1\\) EXAMOE_FAULT_THROW_AFTER_STEP=2: an error on rank 1 alone after step 2")
  message(FATAL_ERROR "error.rank1.log does not hold rank 1's error: ${line}")
endif()
