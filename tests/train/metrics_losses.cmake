# values_of(<metrics.jsonl> <out-var> <json path>...): "step:value;..." of
# the records that have the value at that path (the step records for
# "loss"), in file order.
function(values_of file out)
  file(STRINGS ${file} lines)
  set(res "")
  foreach(line IN LISTS lines)
    string(JSON value ERROR_VARIABLE missing GET "${line}" ${ARGN})
    if(missing STREQUAL "NOTFOUND")
      string(JSON step GET "${line}" step)
      list(APPEND res "${step}:${value}")
    endif()
  endforeach()
  set(${out} "${res}" PARENT_SCOPE)
endfunction()

# value_at(<run dir> <step> <out-var> <json path>...): that step's record's
# value at the path ("" when the record has none).
function(value_at dir step out)
  values_of(${dir}/metrics.jsonl vals ${ARGN})
  foreach(r IN LISTS vals)
    if(r MATCHES "^${step}:")
      string(REGEX REPLACE "^${step}:" "" v "${r}")
      set(${out} ${v} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# require_abs(<value> <"<="|">"> <bound> <what>): a FATAL_ERROR naming `what`
# unless |value| compares so with the bound (value may be an expression).
function(require_abs v op bound what)
  execute_process(COMMAND awk "BEGIN{v=${v};if(v<0)v=-v;exit !(v${op}${bound})}" RESULT_VARIABLE ok)
  if(NOT ok EQUAL 0)
    message(FATAL_ERROR "${what}: |${v}| is not ${op} ${bound}")
  endif()
endfunction()

# losses_of(<metrics.jsonl> <out-var>): "step:loss;step:loss;..." of the step
# records, in file order (event records carry no "loss" and are skipped).
function(losses_of file out)
  values_of(${file} res loss)
  set(${out} "${res}" PARENT_SCOPE)
endfunction()

# ledger_peak_sum(<run dir> <step> <out-var> <category>...): the sum of
# that step record's mem.<category>.peak (the memory ledger's bytes);
# a FATAL_ERROR naming the category a record lacks.
function(ledger_peak_sum dir step out)
  set(sum 0)
  foreach(cat IN LISTS ARGN)
    value_at(${dir} ${step} peak mem ${cat} peak)
    if(peak STREQUAL "")
      message(FATAL_ERROR "${dir}/metrics.jsonl: no step-${step} record with mem.${cat}.peak")
    endif()
    math(EXPR sum "${sum} + ${peak}")
  endforeach()
  set(${out} ${sum} PARENT_SCOPE)
endfunction()

# append_error_logs(<dir> <var>): appends every error.rank<N>.log in dir
# to var. A job that ends by MPI_Abort (drivers/abort_job.hpp) may lose its
# output's last lines in the launcher's teardown, and ranks stopped by the
# first abort may not write theirs, but the first to abort wrote its file.
function(append_error_logs dir var)
  file(GLOB logs ${dir}/error.rank*.log)
  set(text "${${var}}")
  foreach(log IN LISTS logs)
    file(READ ${log} line)
    string(APPEND text "\n${line}")
  endforeach()
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

function(run_checked)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()

# require_in(<text> <pattern> <what>): a FATAL_ERROR naming `what` unless the
# text holds the pattern (a plain substring).
function(require_in text pattern what)
  string(FIND "${text}" "${pattern}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: no \"${pattern}\" in the output:\n${text}")
  endif()
endfunction()

# require_fields(<json> <what> <field;value>...): each numeric field of the
# JSON record equals its value, or a FATAL_ERROR naming `what`.
function(require_fields record what)
  foreach(field_value IN LISTS ARGN)
    string(REPLACE ":" ";" fv "${field_value}")
    list(GET fv 0 field)
    list(GET fv 1 want)
    string(JSON got GET "${record}" ${field})
    # (a JSON boolean reads as ON or OFF)
    if(want MATCHES "^-?[0-9.]+$" AND NOT got EQUAL want OR NOT want MATCHES "^-?[0-9.]+$" AND NOT got STREQUAL want)
      message(FATAL_ERROR "${what}: ${field} is ${got}, expected ${want}: ${record}")
    endif()
  endforeach()
endfunction()
