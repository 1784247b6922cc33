# Tier-0 memory checkpoints (checkpoint.memory_every = 1, buddies on pretend
# one-rank nodes): a 2-rank run whose rank 1 dies after step 3 (fault
# injection; its node memory, the segments it keeps, goes with it) resumes on
# 2 ranks from tier 0 at step 3, rank 1's pieces from its buddy's copy, and
# logs exactly the uninterrupted run's losses; the normal end removes the
# segments. Then the same failure with rank 0's only copy damaged: the load
# names it and falls back to tier 2's step 2, again with the reference losses.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
# Tier 2 only in the failing run (its step 2 is the fallback's): HDF5 writes are slow.
set(T0 --set checkpoint.memory_every=1 --set checkpoint.memory_ranks_per_node=1 --set checkpoint.memory_dir=${WORK}/shm
       --set output.run_dir=${WORK}/run)

run_checked(${MPIEXEC} -n 2 ${EXAMOE} ${ARGS} --set output.run_dir=${WORK}/reference)

set(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP} 3)
set(ENV{EXAMOE_FAULT_RANK} 1)
execute_process(COMMAND ${MPIEXEC} -n 2 ${EXAMOE} ${ARGS} ${T0} --set checkpoint.every=2 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
unset(ENV{EXAMOE_FAULT_EXIT_AFTER_STEP})
unset(ENV{EXAMOE_FAULT_RANK})
if(rc EQUAL 0)
  message(FATAL_ERROR "the run with a failing rank exited 0:\n${out}\n${err}")
endif()
file(GLOB segs RELATIVE ${WORK}/shm ${WORK}/shm/examoe-t0-*)
list(LENGTH segs n)
if(NOT n EQUAL 2 OR NOT segs MATCHES "s00000003-g[0-9a-f]+-o1-h0")
  message(FATAL_ERROR "expected rank 0's two step-3 segments (its own, rank 1's copy), got: ${segs}")
endif()
file(COPY ${WORK}/run/ DESTINATION ${WORK}/saved/run)
file(COPY ${WORK}/shm/ DESTINATION ${WORK}/saved/shm)

# Same-layout resume from tier 0: the step records equal the reference's exactly.
function(resume label)
  execute_process(COMMAND ${MPIEXEC} -n 2 ${EXAMOE} ${ARGS} ${T0} --set checkpoint.resume=true
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${label}: the resumed run failed (${rc}):\n${out}\n${err}")
  endif()
  set(log "${out}\n${err}" PARENT_SCOPE)
endfunction()
function(require_exact count label)
  losses_of(${WORK}/reference/metrics.jsonl ref)
  losses_of(${WORK}/run/metrics.jsonl run)
  list(LENGTH run n)
  if(NOT n EQUAL count)
    message(FATAL_ERROR "${label}: ${n} step records, expected ${count}: ${run}")
  endif()
  foreach(rec IN LISTS run)
    if(NOT rec IN_LIST ref)
      message(FATAL_ERROR "${label}: step:loss ${rec} is not the reference's (${ref})")
    endif()
  endforeach()
endfunction()

resume("tier 0")
require_in("${log}" "its pieces come from its buddy's copy" "rank 1's pieces from rank 0's copy")
require_in("${log}" "step 3 taken from tier 0" "the tier and step")
require_in("${log}" "at step 3" "the resume step")
require_exact(5 "tier-0 resume")  # steps 1-3, then 4-5
file(GLOB left ${WORK}/shm/examoe-t0-*)
if(left)
  message(FATAL_ERROR "a normal end left tier-0 segments: ${left}")
endif()

# Rank 0's own copy (the only one left) damaged: fall back to tier 2.
file(REMOVE_RECURSE ${WORK}/run ${WORK}/shm)
file(RENAME ${WORK}/saved/run ${WORK}/run)
file(RENAME ${WORK}/saved/shm ${WORK}/shm)
file(GLOB own ${WORK}/shm/examoe-t0-*-o0-h0)
execute_process(COMMAND truncate -s -4 ${own} RESULT_VARIABLE trc)
if(NOT trc EQUAL 0)
  message(FATAL_ERROR "truncate ${own} failed")
endif()
resume("fallback")
require_in("${log}" "verifies in no copy" "the damaged piece named")
require_in("${log}" "falling back to tier 2 step 2" "the fallback")
require_in("${log}" "step_00000002 at step 2" "the tier-2 resume")
require_exact(6 "fallback resume")  # steps 1-3, then 3-5 again
