# Distillation after a growth event (growth.distill_steps): the teacher is
# the model before the event, on the same micro-batches.
#  - With a split of noise 0 the grown student computes the teacher's
#    function, so the first step after the event distils a term of 0
#    (|term| <= 5e-7; measured 5e-8: the grown model rounds its logits
#    differently) while the next one, after an update, does not.
#  - The term is added to the loss (loss = ce + aux + z + distill) and
#    leaves the step's cross-entropy alone (the same as without it), while
#    its gradient changes the next step's (step 5's, as step 3's term and
#    gradient are 0).
#  - Negative control: init = random changes the function, and the first
#    step's term is far from 0 (> 2e-6; measured 1.0e-5). NO_RANDOM_CONTROL
#    leaves it out, for decks whose fresh experts take too few tokens at
#    once to change the function measurably.
# Every step of the window has a teacher time in its record, the step
# after it none.
include(${CMAKE_CURRENT_LIST_DIR}/metrics_losses.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/compare_losses.cmake)
separate_arguments(ARGS)
file(REMOVE_RECURSE ${WORK})
set(common ${DECK} ${ARGS} --set train.steps=5 --set checkpoint.every=0 --set growth.every=2 --set growth.add=2
    --set growth.max_experts=6)
set(kd --set growth.distill_steps=2 --set growth.distill_coef=3 --set growth.distill_temperature=2)
run_checked(${EXAMOE} ${common} --set output.run_dir=${WORK}/plain)
run_checked(${EXAMOE} ${common} ${kd} --set output.run_dir=${WORK}/split)
if(NOT NO_RANDOM_CONTROL)
  run_checked(${EXAMOE} ${common} ${kd} --set growth.init=random --set output.run_dir=${WORK}/random)
  value_at(${WORK}/random 3 r3 distill loss)
else()
  set(r3 "not run")
endif()

value_at(${WORK}/split 3 d3 distill loss)
value_at(${WORK}/split 4 d4 distill loss)
value_at(${WORK}/split 5 d5 distill loss)
message(STATUS "distillation term: split steps 3, 4: ${d3}, ${d4}; random step 3: ${r3}")
if(d3 STREQUAL "" OR d4 STREQUAL "" OR r3 STREQUAL "")
  message(FATAL_ERROR "steps 3 and 4 (the window of the event after step 2) have no distill record")
endif()
if(NOT d5 STREQUAL "")
  message(FATAL_ERROR "step 5 is after the window (distill_steps = 2) but has a distill record")
endif()
require_abs(${d3} <= 5e-7 "a split of noise 0 keeps the function: the first step's term")
require_abs(${d4} > 1e-5 "after an update the student differs from the teacher: the second step's term")
if(NOT NO_RANDOM_CONTROL)
  require_abs(${r3} > 2e-6 "init = random changes the function: the first step's term (negative control)")
endif()

foreach(step 3 4)
  value_at(${WORK}/split ${step} loss loss)
  value_at(${WORK}/split ${step} ce ce)
  value_at(${WORK}/split ${step} aux aux)
  value_at(${WORK}/split ${step} z z)
  value_at(${WORK}/split ${step} d distill loss)
  value_at(${WORK}/split ${step} ts distill teacher_s)
  execute_process(COMMAND awk "BEGIN{s=${ce}+${aux}+${z}+${d};d=s-${loss};if(d<0)d=-d;exit !(d<=1e-9*${loss} && ${ts}>0)}"
                  RESULT_VARIABLE ok)
  if(NOT ok EQUAL 0)
    message(FATAL_ERROR "step ${step}: loss ${loss} is not ce ${ce} + aux ${aux} + z ${z} + distill ${d}, or no "
                        "teacher time (${ts})")
  endif()
endforeach()
value_at(${WORK}/plain 3 p3 ce)
value_at(${WORK}/split 3 s3 ce)
value_at(${WORK}/plain 5 p5 ce)
value_at(${WORK}/split 5 s5 ce)
set(LOSS_TOL 1e-12)
require_close(${p3} ${s3} "step 3 cross-entropy without and with distillation (the same forward)")
require_abs("${p5}-(${s5})" > 1e-6 "step 5 cross-entropy: the term's gradient changed step 4's update")
