# A checkpoint write that runs out of room: a run writes its step-2
# checkpoint; resumed under a file-size limit smaller than a checkpoint
# (`ulimit -f`, with SIGXFSZ ignored so that a write fails with EFBIG as on
# a full disk, instead of killing the process), its step-4 save fails. The run
# must stop with an error naming the directory and the fix, leave no partial
# step directory, keep `latest` at step 2, and step 2 must still verify and
# resume to the uninterrupted run's losses.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(common ${DECK} ${ARGS} --set train.eval_every=0 --set checkpoint.every=2)

run_checked(${EXAMOE} ${common} --set train.steps=4 --set output.run_dir=${WORK}/clean)
losses_of(${WORK}/clean/metrics.jsonl clean)
run_checked(${EXAMOE} ${common} --set train.steps=2 --set output.run_dir=${WORK}/run)
file(SIZE ${WORK}/run/ckpt/step_00000002/state.h5 bytes)
math(EXPR limit_kib "${bytes} / 1024 / 2")  # half a checkpoint
string(REPLACE ";" " " cmd "${EXAMOE};${common};--set;train.steps=4;--set;checkpoint.resume=true;--set;output.run_dir=${WORK}/run")
# UCX's shared-memory transport creates files of its own at MPI_Init, which
# the limit would refuse: this one-rank run does without it.
execute_process(COMMAND bash -c "trap '' XFSZ; ulimit -f ${limit_kib}; UCX_TLS=self,tcp exec ${cmd}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(log "${out}\n${err}")
if(NOT rc EQUAL 1)  # an error exit, neither success nor a crash
  message(FATAL_ERROR "expected the run to stop with exit 1 on its step-4 checkpoint (ulimit -f ${limit_kib} KiB, "
                      "a checkpoint is ${bytes} bytes), got ${rc}:\n${log}")
endif()
require_in("${log}" "has no room for the checkpoint" "full disk")
require_in("${log}" "saving checkpoint step 4 in ${WORK}/run/ckpt failed" "full disk")
require_in("${log}" "earlier checkpoints are untouched" "full disk")
require_in("${log}" "set checkpoint.dir to a file system with room" "full disk")
file(GLOB left RELATIVE ${WORK}/run/ckpt ${WORK}/run/ckpt/*)
if(NOT left STREQUAL "latest;step_00000002" AND NOT left STREQUAL "step_00000002;latest")
  message(FATAL_ERROR "full disk: the checkpoint directory holds ${left}, expected step_00000002 and latest only")
endif()
file(READ_SYMLINK ${WORK}/run/ckpt/latest target)
if(NOT target MATCHES "step_00000002$")
  message(FATAL_ERROR "full disk: latest points at ${target}, not step_00000002")
endif()
run_checked(${CKPT} verify ${WORK}/run/ckpt)
run_checked(${EXAMOE} ${common} --set train.steps=4 --set checkpoint.resume=true --set output.run_dir=${WORK}/run)
losses_of(${WORK}/run/metrics.jsonl got)
# Steps 1-2 (first run), then 3-4 of the resumed run; the failed run logged 3-4 too.
list(REMOVE_DUPLICATES got)
message(STATUS "clean ${clean}; run ${got}")
if(NOT got STREQUAL clean)
  message(FATAL_ERROR "full disk: after resuming from step 2 the losses are ${got}, the clean run's ${clean}")
endif()
