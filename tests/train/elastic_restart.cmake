# examoe-elastic: a 2-rank job whose rank 0 dies after step 3 (fault
# injection, first launch only) with checkpoints every 2 steps is relaunched
# on 1 rank with grad_accum doubled, resumes from step 2, and finishes. The
# restart is one record in elastic.jsonl (new world size 1, 1 lost step),
# and every step record of the run, before and after the failure, matches an
# uninterrupted 2-rank run's loss to 1e-5 relative.
# With -DSPARES=1 (examoe-elastic --spares 1) a hot spare replaces the dead
# node instead: the relaunch keeps 2 ranks and grad_accum 1.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/elastic_run.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})

run_checked(${MPIEXEC} -n 2 ${EXAMOE} ${ARGS} --set output.run_dir=${WORK}/reference)

# Rank 0 writes metrics.jsonl, so its step-3 record is there before it dies
# (a dying rank 1 could race rank 0's write).
if(NOT DEFINED SPARES)
  set(SPARES 0)
endif()
elastic_run_with_fault(3 0 "" 120 --ranks 2 --spares ${SPARES} --mpiexec ${MPIEXEC} ${ARGS}
                       --set checkpoint.every=2 --set output.run_dir=${WORK}/elastic)
require_in("${all}" "EXAMOE_FAULT_EXIT_AFTER_STEP=3: rank 0 exiting abruptly" "the injected fault")
elastic_records(1 "restart record" records)
if(SPARES GREATER 0)
  require_in("${all}" "a spare node replaces the failed one (0 left): relaunching on 2 ranks" "the spare")
  require_in("${all}" "launching on 2 ranks (dp 2, grad_accum 1, global batch 4)" "the relaunch")
  require_fields("${records}" "elastic.jsonl" old_ranks:2 new_ranks:2 new_grad_accum:1 last_step:3 resumed_step:2
                 lost_steps:1 spare:ON spares_left:0)
else()
  require_in("${all}" "launching on 1 ranks (dp 1, grad_accum 2, global batch 4)" "the relaunch")
  require_fields("${records}" "elastic.jsonl" old_ranks:2 new_ranks:1 new_grad_accum:2 last_step:3 resumed_step:2
                 lost_steps:1 spare:OFF)
endif()
string(JSON downtime GET "${records}" downtime_s)
if(NOT downtime MATCHES "^[0-9.e+-]+$")
  message(FATAL_ERROR "elastic.jsonl: downtime_s is not a number: ${records}")
endif()

# Steps 1-3 from the first launch, 3-5 again after the resume from step 2.
compare_steps(${WORK}/reference/metrics.jsonl ${WORK}/elastic/metrics.jsonl 6 "elastic run")
