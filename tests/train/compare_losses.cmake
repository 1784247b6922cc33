# require_close(<a> <b> <what>): |a - b| <= TOL |a|, TOL = 1e-5 (the
# determinism contract's tolerance) unless the caller sets LOSS_TOL, or a
# FATAL_ERROR naming `what` and both values. CMake has no floating-point
# arithmetic; awk does.
function(require_close a b what)
  set(tol 1e-5)
  if(DEFINED LOSS_TOL AND NOT LOSS_TOL STREQUAL "")
    set(tol ${LOSS_TOL})
  endif()
  execute_process(COMMAND awk "BEGIN{a=${a};b=${b};d=a-b;if(d<0)d=-d;m=(a<0?-a:a);exit !(d<=${tol}*m)}"
                  RESULT_VARIABLE ok)
  if(NOT ok EQUAL 0)
    message(FATAL_ERROR "${what}: ${a} vs ${b} differ by more than ${tol} relative")
  endif()
endfunction()

# compare_steps(<reference metrics.jsonl> <metrics.jsonl> <count> <label>):
# the run has `count` step records, and each agrees with the reference's
# record of the same step to 1e-5 relative (a resumed run logs only the
# steps after its checkpoint).
function(compare_steps ref_file file count label)
  losses_of(${ref_file} ref)
  losses_of(${file} run)
  message(STATUS "reference: ${ref}")
  message(STATUS "${label}: ${run}")
  list(LENGTH run n)
  if(NOT n EQUAL count)
    message(FATAL_ERROR "${label}: expected ${count} step records, got ${n}")
  endif()
  foreach(rec IN LISTS run)
    string(REGEX REPLACE ":.*" "" step "${rec}")
    string(REGEX REPLACE ".*:" "" b "${rec}")
    set(a "")
    foreach(r IN LISTS ref)
      if(r MATCHES "^${step}:")
        string(REGEX REPLACE ".*:" "" a "${r}")
      endif()
    endforeach()
    if(a STREQUAL "")
      message(FATAL_ERROR "${label}: the reference has no step ${step}")
    endif()
    require_close(${a} ${b} "step ${step}: reference loss vs ${label}")
  endforeach()
endfunction()
