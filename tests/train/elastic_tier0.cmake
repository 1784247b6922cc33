# examoe-elastic with tier 0 every step, and growing back: rank 1 of a
# 2-rank job is killed by SIGKILL after step 2 (fault injection, first launch
# only; its node memory, the segments it keeps, goes with it). The relaunch
# on 1 rank (grad_accum doubled) resumes from tier 0 at step 2, rank 1's
# pieces from the copy rank 0 keeps: elastic.jsonl records 0 lost steps.
# After one step there (--max-ranks 2 --grow-after-steps 1) the supervisor
# stops the job with a checkpoint and relaunches it on 2 ranks (a "grow"
# record, 0 lost steps). Every step's loss matches the uninterrupted 2-rank
# run's to 1e-5 relative, and each step is logged once.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/elastic_run.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})

run_checked(${MPIEXEC} -n 2 ${EXAMOE} ${ARGS} --set output.run_dir=${WORK}/reference)

# The grow is a signal the supervisor sends on seeing step 3 logged (the
# relaunch's first step), and the remaining steps take milliseconds: the job
# holds after step 3 until the signal has come, so it always lands, and the
# job stops after step 4. (The first launch never ends step 3: its rank 1 is
# gone; the grown launch resumes at step 4.)
set(ENV{EXAMOE_FAULT_HOLD_AFTER_STEP} 3)
elastic_run_with_fault(2 1 9 200 --ranks 2 --max-ranks 2 --grow-after-steps 1 --mpiexec ${MPIEXEC} ${ARGS}
                       --set checkpoint.memory_every=1 --set checkpoint.memory_ranks_per_node=1
                       --set checkpoint.memory_dir=${WORK}/shm --set output.run_dir=${WORK}/elastic)
require_in("${all}" "launching on 1 ranks (dp 1, grad_accum 2, global batch 4)" "the relaunch")
require_in("${all}" "step 2 taken from tier 0" "the tier-0 resume")
require_in("${all}" "its pieces come from its buddy's copy" "rank 1's pieces from its buddy's copy")
require_in("${all}" "capacity is back (--grow-after-steps 1)" "the grow condition")

elastic_records(2 "records (a failure, a grow)" records)
list(GET records 0 failure)
list(GET records 1 grow_rec)
require_fields("${failure}" "elastic.jsonl, the failure" old_ranks:2 new_ranks:1 last_step:2 resumed_step:2 lost_steps:0)
require_fields("${grow_rec}" "elastic.jsonl, the grow" old_ranks:1 new_ranks:2 new_grad_accum:1 last_step:4
               resumed_step:4 lost_steps:0)
string(JSON event GET "${grow_rec}" event)
if(NOT event STREQUAL "grow")
  message(FATAL_ERROR "elastic.jsonl: the second record is not a grow: ${grow_rec}")
endif()

# Each of the 8 steps once: 1-2 on 2 ranks, then on 1, then on 2 again.
compare_steps(${WORK}/reference/metrics.jsonl ${WORK}/elastic/metrics.jsonl 8 "elastic run")
