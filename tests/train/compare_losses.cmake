# require_close(<a> <b> <what>): |a - b| <= 1e-5 |a| (the determinism
# contract's tolerance), or a FATAL_ERROR naming `what` and both values.
# CMake has no floating-point arithmetic; awk does.
function(require_close a b what)
  execute_process(COMMAND awk "BEGIN{a=${a};b=${b};d=a-b;if(d<0)d=-d;m=(a<0?-a:a);exit !(d<=1e-5*m)}"
                  RESULT_VARIABLE ok)
  if(NOT ok EQUAL 0)
    message(FATAL_ERROR "${what}: ${a} vs ${b} differ by more than 1e-5 relative")
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
