# One step of the driver tests (see CMakeLists.txt here):
#
#   cmake -DMODE=<train|eval|convert|generate|errors|check|plot|eval_np2|pp2> -DEXAMOE=<exe> -DGENERATE=<exe>
#         -DWORK=<scratch dir> -DSRC=<source tree> [-DPYTHON=<python3>] [-DLAUNCHER=mpiexec|-n|2]
#         -P drivers_test.cmake
#
# MODE train is the fixture: it trains a very small run into WORK/run and
# writes WORK/sample.txt (the first 1500 bytes of the bundled corpus) and
# WORK/short.txt / WORK/empty.txt for the error cases.
cmake_minimum_required(VERSION 3.20)

set(run ${WORK}/run)
set(sample ${WORK}/sample.txt)
set(ln256_plus_1 6.545177444479562)  # ln(256) + 1
string(REPLACE "|" ";" launcher "${LAUNCHER}")
# The fixture's model and run (MODE check resumes it).
set(train_sets --set model.d_model=32 --set model.n_layers=1 --set model.n_heads=2 --set model.seq_len=16
    --set moe.n_experts=4 --set moe.d_expert=32 --set train.steps=3 --set train.micro_batch=2
    --set train.log_every=1 --set train.eval_every=0 --set optim.warmup_steps=1 --set checkpoint.every=3)

# run(<out-var prefix> <expected rc> cmd args...): runs cmd, sets
# <prefix>_OUT / <prefix>_ERR, fails the test on another exit code.
function(run prefix rc)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REPLACE ";" " " shown "${ARGN}")
  set(report "command: ${shown}\nexit code: ${got}\n--- stdout\n${out}--- stderr\n${err}---")
  if(NOT "${got}" STREQUAL "${rc}")
    message(FATAL_ERROR "expected exit code ${rc}\n${report}")
  endif()
  set(${prefix}_OUT "${out}" PARENT_SCOPE)
  set(${prefix}_ERR "${err}" PARENT_SCOPE)
  set(${prefix}_REPORT "${report}" PARENT_SCOPE)
endfunction()

function(require_has text fragment report)
  string(FIND "${text}" "${fragment}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "expected the output to contain\n${fragment}\n${report}")
  endif()
endfunction()

# expect_error(<stderr fragment> cmd args...): exit code 1, and stderr holds
# exactly one line that starts with the program's "error:" prefix and
# contains the fragment.
function(expect_error fragment)
  run(e 1 ${ARGN})
  require_has("${e_ERR}" "${fragment}" "${e_REPORT}")
  if(NOT e_ERR MATCHES "^examoe(-generate)?: error: [^\n]*\n$")
    message(FATAL_ERROR "expected exactly one 'examoe: error: ...' line on stderr\n${e_REPORT}")
  endif()
  if(NOT "${e_OUT}" STREQUAL "")
    message(FATAL_ERROR "expected nothing on stdout\n${e_REPORT}")
  endif()
endfunction()

# eval_json(<prefix> <tokens file> [extra args]): runs `examoe eval` on
# ${ckpt} (default: the run), checks the one JSON line and sets <prefix>_CE
# (as printed), <prefix>_JSON.
set(ckpt ${run})
function(eval_json prefix tokens)
  run(ev 0 ${launcher} ${EXAMOE} eval --checkpoint ${ckpt} --tokens ${tokens} ${ARGN})
  if(NOT ev_OUT MATCHES "^{[^\n]*}\n$")
    message(FATAL_ERROR "expected exactly one JSON line on stdout\n${ev_REPORT}")
  endif()
  string(STRIP "${ev_OUT}" json)
  foreach(k checkpoint tokens_file tokens windows seq_len ce_nats_per_token ppl)
    string(JSON v ERROR_VARIABLE jerr GET "${json}" ${k})
    if(jerr)
      message(FATAL_ERROR "the JSON has no \"${k}\": ${jerr}\n${ev_REPORT}")
    endif()
  endforeach()
  string(JSON ce GET "${json}" ce_nats_per_token)
  string(JSON ce_type TYPE "${json}" ce_nats_per_token)
  if(NOT ce_type STREQUAL "NUMBER" OR NOT ce GREATER 0 OR NOT ce LESS ${ln256_plus_1})
    message(FATAL_ERROR "ce_nats_per_token = ${ce}: expected a finite number in (0, ln(256)+1)\n${ev_REPORT}")
  endif()
  string(JSON ppl GET "${json}" ppl)
  if(NOT ppl GREATER 1)
    message(FATAL_ERROR "ppl = ${ppl}: expected > 1\n${ev_REPORT}")
  endif()
  set(${prefix}_CE "${ce}" PARENT_SCOPE)
  set(${prefix}_JSON "${json}" PARENT_SCOPE)
endfunction()

# micro(<out> <decimal>): the number times 1e6, truncated (for tolerances:
# CMake has no floating-point arithmetic).
function(micro out x)
  if(NOT x MATCHES "^([0-9]+)\\.([0-9]*)$")
    message(FATAL_ERROR "'${x}' is not a plain decimal")
  endif()
  set(whole "${CMAKE_MATCH_1}")
  set(frac "${CMAKE_MATCH_2}000000")
  string(SUBSTRING "${frac}" 0 6 frac)
  string(REGEX REPLACE "^0+([0-9])" "\\1" frac "${frac}")
  math(EXPR v "${whole} * 1000000 + ${frac}")
  set(${out} ${v} PARENT_SCOPE)
endfunction()

# require_same_ce(<ce> <reference ce> <what>): equal within 2e-6 nats
# (summation order), else fail naming `what`.
function(require_same_ce got want what)
  micro(mg ${got})
  micro(mw ${want})
  math(EXPR d "${mg} - ${mw}")
  if(d GREATER 2 OR d LESS -2)
    message(FATAL_ERROR "${what} gives ce ${got}, against ${want}")
  endif()
endfunction()

if(MODE STREQUAL "train")
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK})
  file(READ ${SRC}/data/corpus.txt text LIMIT 2000)
  string(SUBSTRING "${text}" 0 1500 text)  # (LIMIT itself may read a byte more)
  file(WRITE ${sample} "${text}")
  file(WRITE ${WORK}/short.txt "0123456789")
  file(WRITE ${WORK}/empty.txt "")
  run(t 0 ${EXAMOE} ${SRC}/input/tiny.toml ${train_sets} --set output.run_dir=${run})
  if(NOT EXISTS ${run}/ckpt/latest/state.h5 OR NOT EXISTS ${run}/metrics.jsonl)
    message(FATAL_ERROR "training left no ${run}/ckpt/latest/state.h5 or metrics.jsonl\n${t_REPORT}")
  endif()

elseif(MODE STREQUAL "eval")
  eval_json(a ${sample})
  string(JSON n GET "${a_JSON}" tokens)
  string(JSON w GET "${a_JSON}" windows)
  string(JSON t GET "${a_JSON}" seq_len)
  string(JSON ckpt GET "${a_JSON}" checkpoint)
  # 1500 tokens, 1499 predictions in windows of 16: 93 full + 1 of 11.
  if(NOT n EQUAL 1500 OR NOT w EQUAL 94 OR NOT t EQUAL 16 OR NOT ckpt MATCHES "step_00000003$")
    message(FATAL_ERROR "expected tokens 1500, windows 94, seq_len 16, checkpoint .../step_00000003: ${a_JSON}")
  endif()
  # The batch size does not change the result beyond rounding; --seq-len does change the windows.
  eval_json(b ${sample} --batch 5)
  require_same_ce(${b_CE} ${a_CE} "--batch 5 (against the default batch)")
  set(ckpt ${run}/ckpt/step_00000003)
  eval_json(c ${sample} --seq-len 8)
  string(JSON w GET "${c_JSON}" windows)
  if(NOT w EQUAL 188)
    message(FATAL_ERROR "--seq-len 8: expected 188 windows: ${c_JSON}")
  endif()

elseif(MODE STREQUAL "convert")
  # The form every shard error message tells users to run (io/token_shard.hpp).
  file(REMOVE ${WORK}/sample_hint.tok)
  run(cv 0 ${EXAMOE} convert --text ${sample} --out ${WORK}/sample_hint.tok)
  require_has("${cv_OUT}" "wrote 1500 tokens (uint16" "${cv_REPORT}")
  foreach(dtype uint16 uint32)
    set(tok ${WORK}/sample_${dtype}.tok)
    file(REMOVE ${tok})
    run(cv 0 ${EXAMOE} convert --text ${sample} --out ${tok} --dtype ${dtype})
    require_has("${cv_OUT}" "wrote 1500 tokens (${dtype}" "${cv_REPORT}")
    file(SIZE ${tok} size)
    if(dtype STREQUAL "uint16")
      set(want 3032)
    else()
      set(want 6032)
    endif()
    if(NOT size EQUAL want)
      message(FATAL_ERROR "${tok} is ${size} bytes, expected ${want} (32-byte header + 1500 tokens)")
    endif()
    eval_json(text ${sample})
    eval_json(shard ${tok})
    if(NOT text_CE STREQUAL shard_CE)
      message(FATAL_ERROR "ce on the text ${text_CE} != ce on the ${dtype} shard ${shard_CE}")
    endif()
  endforeach()
  # HDF5 (dataset "tokens") gives the same result too.
  run(h5 0 ${WRITE_H5} ${sample} ${WORK}/sample.h5)
  eval_json(hdf5 ${WORK}/sample.h5)
  if(NOT text_CE STREQUAL hdf5_CE)
    message(FATAL_ERROR "ce on the text ${text_CE} != ce on the HDF5 file ${hdf5_CE}")
  endif()
  # A shard under another name is still recognised by its magic.
  file(COPY_FILE ${WORK}/sample_uint16.tok ${WORK}/sample_shard.bin)
  eval_json(bin ${WORK}/sample_shard.bin)
  if(NOT text_CE STREQUAL bin_CE)
    message(FATAL_ERROR "ce on the text ${text_CE} != ce on the shard named .bin ${bin_CE}")
  endif()
  # data.documents = "packed" needs documents: a shard's .docs index (which
  # `examoe convert` does not write) and HDF5 (which has none) are refused
  # with the fix; the text's blank lines are its documents.
  set(packed ${SRC}/input/tiny.toml --check --set model.seq_len=16 --set data.documents=packed)
  run(pk 1 ${EXAMOE} ${packed} --set data.format=shard --set data.path=${WORK}/sample_uint16.tok)
  require_has("${pk_ERR}" "--set data.documents=packed: data.documents = \"packed\" needs the shard's document index ${WORK}/sample_uint16.tok.docs, which does not exist" "${pk_REPORT}")
  require_has("${pk_ERR}" "`examoe-tokenize encode` writes it beside the shard, or unset data.documents" "${pk_REPORT}")
  run(pk 1 ${EXAMOE} ${packed} --set data.format=hdf5 --set data.path=${WORK}/sample.h5)
  require_has("${pk_ERR}" "an HDF5 token dataset has no document index" "${pk_REPORT}")
  require_has("${pk_ERR}" "convert it to a shard with `examoe-tokenize encode`, or unset data.documents" "${pk_REPORT}")
  run(pk 0 ${EXAMOE} ${packed} --set data.path=${sample} --set data.val_fraction=0.2)
  require_has("${pk_OUT}" "validation sequences of 16" "${pk_REPORT}")
  require_has("${pk_OUT}" "packed: " "${pk_REPORT}")

elseif(MODE STREQUAL "eval_np2")
  set(l1 "${launcher}")
  set(launcher "")
  eval_json(one ${sample} --batch 3)
  set(launcher "${l1}")
  eval_json(two ${sample} --batch 3)
  require_same_ce(${two_CE} ${one_CE} "2 ranks (against 1 rank)")

elseif(MODE STREQUAL "generate")
  set(prompt "The hacker ")
  set(args --checkpoint ${run} --prompt "${prompt}" --max-new-tokens 40 --temperature 0.8 --top-k 20)
  run(g1 0 ${GENERATE} ${args} --seed 7)
  run(g2 0 ${GENERATE} ${args} --seed 7)
  foreach(g g1 g2)
    string(FIND "${${g}_OUT}" "${prompt}" at)
    if(NOT at EQUAL 0)
      message(FATAL_ERROR "expected the text to start with the prompt\n${${g}_REPORT}")
    endif()
  endforeach()
  if(NOT g1_OUT STREQUAL g2_OUT)
    message(FATAL_ERROR "the same seed gave different text:\n[${g1_OUT}]\n[${g2_OUT}]")
  endif()
  # 40 new bytes after the prompt, then a newline.
  string(LENGTH "${g1_OUT}" len)
  string(LENGTH "${prompt}" plen)
  math(EXPR want "${plen} + 41")
  if(NOT len EQUAL want)
    message(FATAL_ERROR "expected ${want} bytes of output, got ${len}\n${g1_REPORT}")
  endif()
  # Greedy ignores the seed; a prompt longer than seq_len (16) is cropped to its last 16 tokens.
  run(h1 0 ${GENERATE} --checkpoint ${run} --prompt "A prompt longer than the sixteen-token window"
      --max-new-tokens 8 --temperature 0 --seed 1)
  run(h2 0 ${GENERATE} --checkpoint ${run} --prompt "A prompt longer than the sixteen-token window"
      --max-new-tokens 8 --temperature 0 --seed 2)
  if(NOT h1_OUT STREQUAL h2_OUT OR NOT h1_OUT MATCHES "^A prompt longer than the sixteen-token window")
    message(FATAL_ERROR "greedy decoding differs between seeds or lost the prompt:\n[${h1_OUT}]\n[${h2_OUT}]")
  endif()
  # Without --seed a fresh one is drawn and reported on stderr.
  run(s 0 ${GENERATE} --checkpoint ${run} --prompt "x" --max-new-tokens 2)
  require_has("${s_ERR}" "examoe-generate: seed " "${s_REPORT}")

elseif(MODE STREQUAL "pp2")
  # Evaluation and generation through a pipeline of 2 ranks, each holding its stage's
  # layers (a 3-layer model with tied embeddings, so the last stage's head
  # reads its own copy, and a dense layer): the same text as one rank.
  # PP_RUN: the run's directory (drivers.pp2_ordered_comm has its own).
  set(pprun ${WORK}/pp_run)
  if(DEFINED PP_RUN)
    set(pprun ${PP_RUN})
  endif()
  file(REMOVE_RECURSE ${pprun})
  run(t 0 ${EXAMOE} ${SRC}/input/tiny.toml ${train_sets} --set model.n_layers=3 --set model.tie_embeddings=true
      --set moe.moe_every=2 --set train.steps=2 --set checkpoint.every=2 --set output.run_dir=${pprun})
  foreach(mode "--temperature;0" "--temperature;0.8;--top-k;20;--seed;7")
    set(args --checkpoint ${pprun} --prompt "The hacker " --max-new-tokens 24 ${mode})
    run(one 0 ${GENERATE} ${args})
    run(two 0 ${launcher} ${GENERATE} ${args} --pp 2)
    if(NOT one_OUT STREQUAL two_OUT OR NOT one_OUT MATCHES "^The hacker ")
      message(FATAL_ERROR "--pp 2 gave other text than one rank (${mode}):\n[${one_OUT}]\n[${two_OUT}]\n${two_REPORT}")
    endif()
  endforeach()
  # examoe eval --pp 2: the 1-rank cross-entropy (the stages pass each
  # batch on; the tail window is shorter), and 2 stages on 1 rank refused.
  set(ckpt ${pprun})
  set(l2 "${launcher}")
  set(launcher "")
  eval_json(one ${sample} --batch 3)
  set(launcher "${l2}")
  eval_json(two ${sample} --batch 3 --pp 2)
  require_same_ce(${two_CE} ${one_CE} "examoe eval --pp 2 (against 1 rank)")
  # The stages' transport: the run's comm.backend, or the ordered test
  # double under EXAMOE_ORDERED_COMM=1.
  set(want_transport mpi)
  if("$ENV{EXAMOE_ORDERED_COMM}" STREQUAL "1")
    set(want_transport ordered)
  endif()
  string(JSON transport GET "${two_JSON}" transport)
  if(NOT transport STREQUAL want_transport)
    message(FATAL_ERROR "examoe eval --pp 2 ran its stages over ${transport}, not ${want_transport}")
  endif()
  expect_error("examoe: error: --pp 2 does not divide the 1 ranks"
               ${EXAMOE} eval --checkpoint ${pprun} --tokens ${sample} --pp 2)
  expect_error("examoe-generate: error: --pp 3 does not divide the 2 ranks"
               ${launcher} ${GENERATE} --checkpoint ${pprun} --prompt "x" --pp 3 --seed 1)
  expect_error("holds a model of 1 layers, which cannot be split over 2 pipeline stages: use at most 1"
               ${launcher} ${GENERATE} --checkpoint ${run} --prompt "x" --pp 2 --seed 1)

elseif(MODE STREQUAL "errors")
  expect_error("examoe: error: checkpoint ${WORK}/no_such_run does not exist"
               ${EXAMOE} eval --checkpoint ${WORK}/no_such_run --tokens ${sample})
  expect_error("examoe: error: no checkpoint given: pass --checkpoint DIR" ${EXAMOE} eval --tokens ${sample})
  expect_error("examoe: error: no tokens file given: pass --tokens FILE" ${EXAMOE} eval --checkpoint ${run})
  expect_error("holds no complete checkpoint" ${EXAMOE} eval --checkpoint ${WORK} --tokens ${sample})
  expect_error("examoe: error: tokens file ${WORK}/missing.txt does not exist"
               ${EXAMOE} eval --checkpoint ${run} --tokens ${WORK}/missing.txt)
  expect_error("examoe: error: tokens file ${WORK}/empty.txt is empty"
               ${EXAMOE} eval --checkpoint ${run} --tokens ${WORK}/empty.txt)
  expect_error("examoe: error: tokens file ${WORK}/short.txt holds 10 tokens, too few for one window of seq_len 16: evaluation needs at least 17 tokens"
               ${EXAMOE} eval --checkpoint ${run} --tokens ${WORK}/short.txt)
  file(WRITE ${WORK}/not_a_shard.tok "plain text, not a shard")
  expect_error("not an ExaMoE token shard" ${EXAMOE} eval --checkpoint ${run} --tokens ${WORK}/not_a_shard.tok)
  expect_error("examoe: error: --batch: must be a number >= 1, not 0" ${EXAMOE} eval --checkpoint ${run} --tokens ${sample}
               --batch 0)
  expect_error("examoe: error: The following argument was not expected: --bogus"
               ${EXAMOE} eval --checkpoint ${run} --tokens ${sample} --bogus)
  expect_error("examoe: error: The following arguments were not expected: train.steps=1 --set"
               ${EXAMOE} eval --checkpoint ${run} --tokens ${sample} --set train.steps=1)
  expect_error("examoe: error: `examoe eval` takes no deck, --set, --check or --ranks"
               ${EXAMOE} --check eval --checkpoint ${run} --tokens ${sample})
  expect_error("examoe: error: --text ${WORK}/missing.txt: no such file" ${EXAMOE} convert --text ${WORK}/missing.txt
               --out ${WORK}/x.tok)
  expect_error("examoe: error: --text ${WORK}/empty.txt: the file is empty" ${EXAMOE} convert --text ${WORK}/empty.txt
               --out ${WORK}/x.tok)
  expect_error("examoe: error: no output given: pass --out FILE.tok" ${EXAMOE} convert --text ${sample})
  expect_error("examoe: error: token dtype 'int8' is not supported" ${EXAMOE} convert --text ${sample}
               --out ${WORK}/x.tok --dtype int8)
  expect_error("examoe-generate: error: the prompt is empty" ${GENERATE} --checkpoint ${run} --seed 1)
  # An explicitly empty --prompt "" (a function's ARGN would drop the empty argument).
  execute_process(COMMAND ${GENERATE} --checkpoint ${run} --prompt "" --seed 1 RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "^examoe-generate: error: the prompt is empty")
    message(FATAL_ERROR "--prompt \"\": expected exit code 1 and the empty-prompt error, got ${rc}: ${err}")
  endif()
  expect_error("examoe-generate: error: no checkpoint given" ${GENERATE} --prompt "hi" --seed 1)
  expect_error("examoe-generate: error: checkpoint ${WORK}/no_such_run does not exist"
               ${GENERATE} --checkpoint ${WORK}/no_such_run --prompt "hi" --seed 1)
  expect_error("examoe-generate: error: --temperature: must be a number >= 0, not -1" ${GENERATE} --checkpoint ${run}
               --prompt "hi" --temperature -1)
  # --help still prints and exits 0.
  run(h 0 ${EXAMOE} eval --help)
  require_has("${h_OUT}" "--checkpoint" "${h_REPORT}")

elseif(MODE STREQUAL "check")
  # `examoe DECK --check` with checkpoint.resume: the checkpoint the run would
  # resume from must be complete and match the model.
  set(check ${EXAMOE} ${SRC}/input/tiny.toml --check ${train_sets} --set checkpoint.resume=true)
  run(ok 0 ${check} --set output.run_dir=${run} --set train.steps=5)
  require_has("${ok_OUT}" "checkpoint.resume: ${run}/ckpt/step_00000003 (step 3) is complete and matches the model\n"
              "${ok_REPORT}")
  run(done 0 ${check} --set output.run_dir=${run})
  require_has("${done_OUT}" "it is at or past train.steps = 3: nothing to train" "${done_REPORT}")
  run(fresh 0 ${check} --set output.run_dir=${WORK}/fresh_run)
  require_has("${fresh_OUT}" "checkpoint.resume: no complete checkpoint under ${WORK}/fresh_run/ckpt yet; the run starts from step 0"
              "${fresh_REPORT}")
  # A different model: a dense layer where the checkpoint has an MoE one, other expert widths.
  expect_error("examoe: error: --set checkpoint.resume=true: ${run}/ckpt/step_00000003/state.h5 has no dataset /model/layers.0.mlp.w1 "
               ${check} --set output.run_dir=${run} --set moe.moe_every=0)
  expect_error("which the model needs; the checkpoint was written for a different model: load it with the deck it was written with"
               ${check} --set output.run_dir=${run} --set moe.moe_every=0)
  expect_error("dataset /model/layers.0.moe.experts.w1 in ${run}/ckpt/step_00000003/state.h5 has shape [4, 32, 32] but the model expects [4, 48, 32]"
               ${check} --set output.run_dir=${run} --set moe.d_expert=48)
  # A step directory whose state.h5 is not HDF5 (a copy cut short, say).
  file(REMOVE_RECURSE ${WORK}/bad_run)
  file(MAKE_DIRECTORY ${WORK}/bad_run/ckpt/step_00000003)
  file(WRITE ${WORK}/bad_run/ckpt/step_00000003/state.h5 "not HDF5")
  expect_error("cannot read checkpoint file ${WORK}/bad_run/ckpt/step_00000003/state.h5 (8 bytes)"
               ${check} --set output.run_dir=${WORK}/bad_run)
  expect_error("The file is truncated or corrupt" ${check} --set output.run_dir=${WORK}/bad_run)
  # A directory the run cannot write. Root writes anywhere: as root, run as
  # nobody (setpriv) when possible.
  execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(as_user "")
  if(uid STREQUAL "0")
    find_program(SETPRIV setpriv)
    if(SETPRIV)
      set(as_user ${SETPRIV} --reuid=65534 --regid=65534 --clear-groups)
      # The binary may link libraries only root can read (a Kokkos built
      # under root's home, as scripts/setup.sh openmp does).
      execute_process(COMMAND ${as_user} ${EXAMOE} --version RESULT_VARIABLE runs OUTPUT_QUIET ERROR_QUIET)
      if(NOT runs EQUAL 0)
        message(STATUS "examoe does not start as nobody (its libraries are not readable to that user)")
        set(as_user "")
      endif()
    endif()
  endif()
  if(uid STREQUAL "0" AND NOT as_user)
    message(STATUS "running as root and examoe cannot run as another user: the unwritable-directory case is "
                   "not checked")
  else()
    file(REMOVE_RECURSE ${WORK}/locked ${WORK}/open)
    file(MAKE_DIRECTORY ${WORK}/locked ${WORK}/open)
    file(CHMOD ${WORK}/locked PERMISSIONS OWNER_READ OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    file(CHMOD ${WORK}/open PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_WRITE GROUP_EXECUTE
         WORLD_READ WORLD_WRITE WORLD_EXECUTE)
    expect_error("checkpoint.dir = \"${WORK}/locked/ckpt\": ${WORK}/locked is not writable (Permission denied); choose a directory this user can write"
                 ${as_user} ${check} --set checkpoint.dir=${WORK}/locked/ckpt --set output.run_dir=${WORK}/open)
    file(CHMOD ${WORK}/locked PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
  endif()

elseif(MODE STREQUAL "plot")
  set(png ${WORK}/loss.png)
  file(REMOVE ${png})
  execute_process(COMMAND ${PYTHON} -c "import matplotlib" RESULT_VARIABLE no_mpl OUTPUT_QUIET ERROR_QUIET)
  if(no_mpl)
    message(STATUS "matplotlib is not installed: skipping")
    return()
  endif()
  # Event lines, a null val_loss, a repeated step and a truncated last line are all handled.
  file(READ ${run}/metrics.jsonl m)
  file(WRITE ${WORK}/metrics.jsonl "${m}{\"step\":2,\"tokens\":64,\"loss\":5.0,\"val_loss\":4.9}\n{\"step\":9,\"tok")
  run(p 0 ${PYTHON} ${SRC}/scripts/plot_metrics.py ${WORK}/metrics.jsonl -o ${png})
  require_has("${p_OUT}" "wrote ${png}" "${p_REPORT}")
  file(READ ${png} head LIMIT 8 HEX)
  if(NOT head STREQUAL "89504e470d0a1a0a")
    message(FATAL_ERROR "${png} is not a PNG (starts with ${head})")
  endif()
  run(q 1 ${PYTHON} ${SRC}/scripts/plot_metrics.py ${WORK}/none.jsonl -o ${png})
  require_has("${q_ERR}" "does not exist" "${q_REPORT}")

else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
