# A rank that dies mid-run (fault injection: world rank 1 exits abruptly
# after step 2) makes the survivor end the job well within the test's
# TIMEOUT, with one message naming rank 1.
#
# -disable-auto-cleanup stops hydra from killing the survivor itself, which
# is its default when a rank exits abnormally (it then ends the job at once,
# exit code 86, naming nobody). Batch launchers do not always do that (srun
# without --kill-on-bad-exit, a node that vanishes), and then only ExaMoE's
# watchdog stands between the survivor and a hang until the wall-time limit.
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})

execute_process(COMMAND ${MPIEXEC} --help OUTPUT_VARIABLE help ERROR_VARIABLE help)
if(NOT help MATCHES "disable-auto-cleanup")
  # Printed for SKIP_REGULAR_EXPRESSION: without it the launcher, not ExaMoE, would end the job.
  message(STATUS "SKIP: ${MPIEXEC} is not MPICH's hydra (no -disable-auto-cleanup)")
  return()
endif()

set(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP} 2)
set(ENV{EXAMOE_FAULT_RANK} 1)
string(TIMESTAMP t0 "%s")
# TIMEOUT: a broken watchdog fails this test with its output rather than
# leaving ctest to kill a hung job.
execute_process(COMMAND ${MPIEXEC} -disable-auto-cleanup -n 2 ${EXAMOE} ${DECK} ${ARGS} --set train.steps=8
                        --set checkpoint.every=0 --set train.eval_every=0 --set resilience.timeout_s=20
                        --set output.run_dir=${WORK}/run
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 150)
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
set(all "${out}\n${err}")
message(STATUS "exit ${rc} after ${took} s; output:\n${all}")

if(NOT all MATCHES "EXAMOE_FAULT_EXIT_AFTER_STEP=2: rank 1 exiting abruptly")
  message(FATAL_ERROR "the injected fault did not fire on rank 1 (EXAMOE_FAULT_RANK support missing?)")
endif()
if(rc STREQUAL "0")
  message(FATAL_ERROR "the job exited 0 although rank 1 died")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the survivor did not end the job within 150 s (${rc}): the watchdog did not fire")
endif()
# (The step is the last one rank 1's heartbeat recorded, which on these
# millisecond steps may be before the first.)
set(named "rank 1 \\(host [^,]+, pid [0-9]+\\) stopped responding: last heartbeat [0-9.]+ s ago")
if(NOT all MATCHES "${named} (at step [0-9]+|before the first step)")
  message(FATAL_ERROR "no message from the survivor naming rank 1 as the one that stopped responding")
endif()
if(NOT all MATCHES "rank 0 is aborting the job")
  message(FATAL_ERROR "the message does not say which rank aborts the job")
endif()
# The reporter leaves its message next to the heartbeats.
if(NOT EXISTS ${WORK}/run/.heartbeat/abort)
  message(FATAL_ERROR "no ${WORK}/run/.heartbeat/abort written by the reporting rank")
endif()
