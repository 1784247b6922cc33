# model_parallel_ranks(<args> <out>): tp * cp * pp as the --set arguments
# give them (1 where unset). Tensor- and context-parallel ranks share their
# micro-batches and every pipeline stage sees all of them, so the
# data-parallel size of a run is its rank count over this product.
function(model_parallel_ranks args out)
  set(product 1)
  foreach(dim tp cp pp)
    if(args MATCHES "parallel\\.${dim}=([0-9]+)")
      math(EXPR product "${product} * ${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out} ${product} PARENT_SCOPE)
endfunction()
