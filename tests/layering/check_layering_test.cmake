# scripts/check-layering.sh on copies of this tree's src/ and
# docs/architecture.md, each broken one way: it must exit 1 (2 for a missing
# order line) and name the offending file, line and rule.
#   cmake -DSOURCE=<source tree> -DWORK=<scratch dir> -P check_layering_test.cmake

# A fresh copy of the tree in WORK/<name>; returns its path in `out`.
function(fresh_copy name out)
  set(dir ${WORK}/${name})
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir}/docs)
  file(COPY ${SOURCE}/src DESTINATION ${dir})
  file(COPY ${SOURCE}/docs/architecture.md DESTINATION ${dir}/docs)
  set(${out} ${dir} PARENT_SCOPE)
endfunction()

# Appends `text` as a new last line of `file`; returns that line's number.
function(append_line file text out)
  file(READ ${file} body)
  if(NOT body MATCHES "\n$")
    string(APPEND body "\n")
  endif()
  string(REGEX MATCHALL "\n" newlines "${body}")
  list(LENGTH newlines n)
  file(WRITE ${file} "${body}${text}\n")
  math(EXPR n "${n} + 1")
  set(${out} ${n} PARENT_SCOPE)
endfunction()

# Runs the check on `dir`; it must exit `rc` and print every string in ARGN.
function(expect dir rc)
  execute_process(COMMAND bash ${SOURCE}/scripts/check-layering.sh ${dir}
                  RESULT_VARIABLE got OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "check-layering.sh on ${dir} (exit ${got}):\n${out}${err}")
  if(NOT got EQUAL rc)
    message(FATAL_ERROR "check-layering.sh exited ${got} on ${dir}, expected ${rc}")
  endif()
  foreach(s IN LISTS ARGN)
    string(FIND "${out}${err}" "${s}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "check-layering.sh's output on ${dir} lacks: ${s}")
    endif()
  endforeach()
endfunction()

# The copy as it is passes (so the failures below are the broken lines').
fresh_copy(clean dir)
expect(${dir} 0 "check-layering: ok")

# A lower layer including a higher one: model -> train.
fresh_copy(upward dir)
append_line(${dir}/src/model/transformer.hpp "#include \"train/trainer.hpp\"" line)
expect(${dir} 1 "src/model/transformer.hpp:${line}: #include \"train/trainer.hpp\": model may not include train"
       "check-layering: FAILED")

# The same, from a subfolder, through the generated examoe/ prefix.
fresh_copy(prefixed dir)
append_line(${dir}/src/io/checkpoint/checkpoint_read.cpp "#  include \"examoe/train/trainer.hpp\"" line)
expect(${dir} 1 "src/io/checkpoint/checkpoint_read.cpp:${line}: #include \"examoe/train/trainer.hpp\": io may not include train")

# Two folders of one rank: bench -> inference.
fresh_copy(same_rank dir)
append_line(${dir}/src/bench/bench_json.cpp "#include \"inference/generate.hpp\"" line)
expect(${dir} 1 "src/bench/bench_json.cpp:${line}: #include \"inference/generate.hpp\": bench and inference are on the same layer")

# A link upward, with no #include behind it: a scratch target of model
# linking the train library, over two lines and by its ExaMoE:: alias.
fresh_copy(link_upward dir)
append_line(${dir}/src/model/CMakeLists.txt "add_library(examoe_model_scratch OBJECT shard.cpp)" line)
append_line(${dir}/src/model/CMakeLists.txt "target_link_libraries(examoe_model_scratch PRIVATE examoe_core\n  ExaMoE::examoe_train)" line)
expect(${dir} 1 "src/model/CMakeLists.txt:${line}: links examoe_train: model may not link train (a layer above it)"
       "check-layering: FAILED")

# A link between two folders of one rank: inference -> bench.
fresh_copy(link_same_rank dir)
append_line(${dir}/src/inference/CMakeLists.txt "target_link_libraries(examoe_inference PRIVATE examoe_bench)" line)
expect(${dir} 1 "src/inference/CMakeLists.txt:${line}: links examoe_bench: inference and bench are on the same layer")

# A folder the order does not name.
fresh_copy(unknown dir)
file(MAKE_DIRECTORY ${dir}/src/elastic)
file(WRITE ${dir}/src/elastic/rescale.cpp "#include \"core/error.hpp\"\n")
expect(${dir} 1 "src/elastic/: not in the layer order of docs/architecture.md")

# No order line at all.
fresh_copy(no_order dir)
file(WRITE ${dir}/docs/architecture.md "# ExaMoE architecture\n\n## Layers\n\nNothing here.\n")
expect(${dir} 2 "no 'Layer order (lowest first)")

file(REMOVE_RECURSE ${WORK})
