# zb under bf16 products (precision.compute = "bf16"): the deferred weight
# gradients keep bf16 copies of their operands, which the products round
# to bf16 anyway, so
#  - the losses equal the 1f1b schedule's bit for bit (W computes the same
#    products; it only runs later), and
#  - each stage's pipeline record holds half the fp32 copies' bytes more
#    than 1f1b's (each against 1f1b in its own precision: bf16 also keeps
#    the routed experts' activations in bf16), plus the one fp32 scratch W widens a product's operands
#    into: 64 rows of the widest input and output gradient, 1024 + 1024
#    columns on stage 0 (its dense FFN) and 64 + 64 on stage 1.
# The deck's ZeRO 2 runs W at fixed points of the schedule, so what each
# stage holds at its peak is the same in every run (under ZeRO 0/1 W fills
# the waits, and how many are pending depends on timing).
#   -DEXAMOE -DMPIEXEC -DWORK "-DARGS=..." (pp 2, ZeRO 2, 4 micro-batches)
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
foreach(run "1f1b;bf16" "zb;bf16" "1f1b;fp32" "zb;fp32")
  list(GET run 0 schedule)
  list(GET run 1 precision)
  run_checked(${MPIEXEC} -n 2 ${EXAMOE} ${ARGS} --set pipeline.schedule=${schedule}
              --set precision.compute=${precision} --set output.run_dir=${WORK}/${schedule}_${precision})
endforeach()
losses_of(${WORK}/1f1b_bf16/metrics.jsonl want)
losses_of(${WORK}/zb_bf16/metrics.jsonl got)
message(STATUS "1f1b bf16: ${want}\nzb bf16:   ${got}")
if(want STREQUAL "" OR NOT got STREQUAL want)
  message(FATAL_ERROR "zb's losses under bf16 products differ from 1f1b's: its bf16 copies changed a product")
endif()
set(scratch_0 524288)  # 4 * 64 * (1024 + 1024)
set(scratch_1 32768)   # 4 * 64 * (64 + 64)
foreach(stage 0 1)
  value_at(${WORK}/1f1b_bf16 2 base pipeline activation_bytes ${stage})
  value_at(${WORK}/zb_bf16 2 half pipeline activation_bytes ${stage})
  value_at(${WORK}/1f1b_fp32 2 base32 pipeline activation_bytes ${stage})
  value_at(${WORK}/zb_fp32 2 full pipeline activation_bytes ${stage})
  if(base STREQUAL "" OR half STREQUAL "" OR base32 STREQUAL "" OR full STREQUAL "")
    message(FATAL_ERROR "stage ${stage}: no step-2 pipeline record with activation_bytes")
  endif()
  message(STATUS "stage ${stage}: 1f1b bf16 ${base} B, zb bf16 ${half} B, 1f1b fp32 ${base32} B, zb fp32 ${full} B")
  require_abs("(${half} - ${base}) - ((${full} - ${base32}) / 2 + ${scratch_${stage}})" "<=" 0
              "stage ${stage}: zb's bf16 copies against half its fp32 ones plus the scratch")
endforeach()
