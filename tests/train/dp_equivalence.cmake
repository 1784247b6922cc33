# One data-parallel layout against the single-rank reference run (the
# fixture train.dp_reference): NP ranks, each taking micro-batches of 2
# sequences, so that with grad_accum = 4 / NP the global batch (8, as
# tiny.toml) and the micro-batch composition equal the reference's. The
# micro-batch size must stay fixed because the MoE aux/z losses and expert
# capacity are per micro-batch (as in Megatron-LM and DeepSpeed).
#   -DNP=2|4 -DEXTRA="--set parallel.zero=..." -DREF=<reference run dir>
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
separate_arguments(ARGS)
separate_arguments(EXTRA)
file(REMOVE_RECURSE ${WORK})
# The data-parallel size is NP / (tp * cp * pp) unless DP says otherwise (a
# pipeline case sets its own grad_accum >= pp in EXTRA, which wins over the
# one derived here).
include(${CMAKE_CURRENT_LIST_DIR}/model_parallel_ranks.cmake)
model_parallel_ranks("${EXTRA}" mp_ranks)
if(NOT DEFINED DP)
  math(EXPR DP "${NP} / ${mp_ranks}")
endif()
math(EXPR accum "4 / ${DP}")
run_checked(${MPIEXEC} -n ${NP} ${EXAMOE} ${ARGS} --set train.grad_accum=${accum} ${EXTRA}
            --set output.run_dir=${WORK})
# As many step records as the run's train.steps (5 unless the args say
# otherwise; the last --set wins, as in the driver).
set(steps 5)
foreach(arg IN LISTS ARGS EXTRA)
  if(arg MATCHES "^train\\.steps=([0-9]+)$")
    set(steps ${CMAKE_MATCH_1})
  endif()
endforeach()
compare_steps(${REF}/metrics.jsonl ${WORK}/metrics.jsonl ${steps} "${NP} ranks ${EXTRA}")

# The run's start record (the first line of its metrics), read once.
file(STRINGS ${WORK}/metrics.jsonl start LIMIT_COUNT 1)

# A bf16 case (LOSS_TOL set by the caller, see tests/train/CMakeLists.txt)
# must really have multiplied in bf16: its losses alone cannot show it, as
# the bf16-fp32 gap on these decks is of the size of the tolerance. The
# start record carries the process's matmul precision, as the kernels had it.
if("${ARGS};${EXTRA}" MATCHES "precision\\.compute=bf16")
  string(JSON matmuls GET "${start}" precision matmuls)
  if(NOT matmuls STREQUAL "bf16")
    message(FATAL_ERROR "the run was asked for bf16 but its start record says its products ran in ${matmuls}")
  endif()
endif()

# Under EXAMOE_ORDERED_COMM=1 the strategies' transport must really have
# been the ordered test double (tests/train/CMakeLists.txt, ORDERED_COMM).
if("$ENV{EXAMOE_ORDERED_COMM}" STREQUAL "1")
  string(JSON transport GET "${start}" layout transport)
  if(NOT transport STREQUAL "ordered")
    message(FATAL_ERROR "the run was asked for the ordered transport but its start record says ${transport}")
  endif()
endif()

# An expert-parallel layout must really have run as one: its start record
# names the ep size and this rank's share of the experts.
if(EXTRA MATCHES "parallel\\.ep=([0-9]+)")
  set(want ${CMAKE_MATCH_1})
  string(JSON ep GET "${start}" layout ep)
  string(JSON here GET "${start}" layout experts_here)
  string(JSON experts GET "${start}" config moe n_experts)
  math(EXPR share "${experts} / ${want}")
  if(NOT ep EQUAL want OR NOT here EQUAL share)
    message(FATAL_ERROR "the run was asked for ep = ${want} but its start record says ep = ${ep} with ${here} "
                        "experts here (want ${share})")
  endif()
endif()

# Expert re-placement must really have happened and moved experts. That a
# record's after is below its before is the trainer's rule for taking a
# placement, so it only checks the record; how good the placement is, is
# checked against the brute-force best in tests/parallel/test_expert_placement.
if(EXTRA MATCHES "moe\\.replace_every")
  file(STRINGS ${WORK}/metrics.jsonl lines REGEX "\"event\":\"expert_replacement\"")
  list(LENGTH lines n)
  if(n EQUAL 0)
    message(FATAL_ERROR "the run (${EXTRA}) never re-placed an expert: no expert_replacement record")
  endif()
  foreach(line IN LISTS lines)
    string(JSON step GET "${line}" step)
    string(JSON layer GET "${line}" layer)
    string(JSON before GET "${line}" rank_imbalance_before)
    string(JSON after GET "${line}" rank_imbalance_after)
    string(JSON moved GET "${line}" moved)
    message(STATUS "step ${step} layer ${layer}: rank load max/mean ${before} -> ${after}, ${moved} experts moved")
    if(NOT after LESS before OR moved EQUAL 0)
      message(FATAL_ERROR "re-placement at step ${step} layer ${layer} did not lower the rank load "
                          "(${before} -> ${after}) or moved nothing (${moved})")
    endif()
  endforeach()
endif()

# A pipeline layout must really have run as one, and its stages must have
# kept the schedule's contexts: m (the micro-batches) alive at once on every
# stage under gpipe, at most pp - stage under 1f1b, the warm-up's chunk
# forwards plus one under interleaved (the last step's record).
if(EXTRA MATCHES "parallel\\.pp=([0-9]+)")
  set(pp ${CMAKE_MATCH_1})
  file(STRINGS ${WORK}/metrics.jsonl lines)
  set(last "")
  foreach(line IN LISTS lines)
    string(JSON sched ERROR_VARIABLE none GET "${line}" pipeline schedule)
    if(none STREQUAL "NOTFOUND")
      set(last "${line}")
    endif()
  endforeach()
  if(last STREQUAL "")
    message(FATAL_ERROR "the run was asked for pp = ${pp} but logged no pipeline record")
  endif()
  string(JSON stages GET "${last}" pipeline stages)
  string(JSON sched GET "${last}" pipeline schedule)
  string(JSON m GET "${last}" pipeline micro_batches)
  if(NOT stages EQUAL pp)
    message(FATAL_ERROR "the run was asked for pp = ${pp} but its record says ${stages} stages")
  endif()
  math(EXPR top "${pp} - 1")
  foreach(s RANGE ${top})
    string(JSON live GET "${last}" pipeline peak_contexts ${s})
    string(REGEX REPLACE "\\..*" "" live "${live}")
    math(EXPR bound "${pp} - ${s}")
    if(sched STREQUAL "gpipe")
      set(bound ${m})
    elseif(sched STREQUAL "interleaved")
      # The warm-up's (pp - s - 1)*2 + (v - 1)*pp chunk forwards plus one,
      # all m*v when m = pp.
      string(JSON v GET "${last}" pipeline virtual_stages)
      math(EXPR all "${m} * ${v}")
      math(EXPR bound "(${pp} - ${s} - 1) * 2 + (${v} - 1) * ${pp} + 1")
      if(m EQUAL pp OR all LESS bound)
        set(bound ${all})
      endif()
    elseif(m LESS bound)
      set(bound ${m})
    endif()
    message(STATUS "stage ${s}: ${live} contexts alive at most (${sched}, m = ${m}, expected ${bound})")
    if(NOT live EQUAL bound)
      message(FATAL_ERROR "stage ${s} kept ${live} contexts alive under ${sched} with m = ${m}, expected ${bound}")
    endif()
  endforeach()
endif()

if(CHECK_NORM)
  # Every step's gradient norm, which the losses under AdamW hardly show.
  values_of(${REF}/metrics.jsonl norms_ref grad_norm)
  values_of(${WORK}/metrics.jsonl norms_run grad_norm)
  list(LENGTH norms_ref n_ref)
  list(LENGTH norms_run n_run)
  if(n_ref EQUAL 0 OR NOT n_ref EQUAL n_run)
    message(FATAL_ERROR "gradient norms: ${n_ref} in the reference, ${n_run} in the run")
  endif()
  foreach(a b IN ZIP_LISTS norms_ref norms_run)
    string(REGEX REPLACE "^[0-9]+:" "" a "${a}")
    string(REGEX REPLACE "^[0-9]+:" "" b "${b}")
    require_close(${a} ${b} "gradient norm: reference vs ${NP} ranks")
  endforeach()
  message(STATUS "gradient norms: ${n_run} steps agree")
endif()

if(CHECK_VAL)
  # The validation loss of the last step: the same global validation batches
  # in every layout.
  foreach(f ref run)
    if(f STREQUAL "ref")
      file(STRINGS ${REF}/metrics.jsonl lines)
    else()
      file(STRINGS ${WORK}/metrics.jsonl lines)
    endif()
    set(val_${f} "")
    foreach(line IN LISTS lines)
      string(JSON v ERROR_VARIABLE none GET "${line}" val_loss)
      if(none STREQUAL "NOTFOUND" AND NOT v STREQUAL "null")
        set(val_${f} ${v})
      endif()
    endforeach()
  endforeach()
  message(STATUS "validation loss: reference ${val_ref}, ${NP} ranks ${val_run}")
  if(val_ref STREQUAL "" OR val_run STREQUAL "")
    message(FATAL_ERROR "no validation loss in the reference (${val_ref}) or the run (${val_run})")
  endif()
  require_close(${val_ref} ${val_run} "validation loss: reference vs ${NP} ranks")
endif()
