# Arch-tuned builds: the CPU ExaMoE's own code (libraries, drivers, tests,
# benchmarks; not its dependencies) is compiled for.
#
#   EXAMOE_ARCH=native    -march=native (scripts/setup.sh's default)
#   EXAMOE_ARCH=znver3    -march=znver3 (any -march value of the compiler)
#   EXAMOE_ARCH=          the compiler's default, generic x86-64 (packaging, Spack)
#
# A Kokkos configured with a host Kokkos_ARCH_* option already puts its
# -march flags on Kokkos::kokkos, which every ExaMoE target links: ExaMoE
# then follows Kokkos' choice and adds nothing, so the two never disagree.
# With nvcc_wrapper as the compiler (CUDA builds) the flag reaches only the
# host compiler: nvcc_wrapper hands options it does not know to it.
set(EXAMOE_ARCH "" CACHE STRING "CPU target for ExaMoE's own code: -march=<EXAMOE_ARCH> (e.g. native); empty: the compiler's default")

set(_exa_host_arch_re "KOKKOS_ARCH_(NATIVE|SSE42|AVX|AVX2|AVX512XEON|AVX512MIC|KNC|KNL|WSM|SNB|HSW|BDW|SKL|SKX|ICL|ICX|SPR|AMDAVX|AMD_AVX2|AMD_ZEN[0-9]*|ZEN[0-9]*|ARMV[0-9A-Z_]*|A64FX|POWER[0-9]+|RISCV_[A-Z0-9_]+)")
file(STRINGS "${EXAMOE_KOKKOS_CONFIG_H}" _exa_kk_arch REGEX "^#define ${_exa_host_arch_re}([ \t]|$)")
set(EXAMOE_KOKKOS_HOST_ARCH "")
foreach(_l IN LISTS _exa_kk_arch)
  string(REGEX MATCH "${_exa_host_arch_re}" _a "${_l}")
  string(REPLACE "KOKKOS_ARCH_" "" _a "${_a}")
  list(APPEND EXAMOE_KOKKOS_HOST_ARCH ${_a})
endforeach()

set(EXAMOE_ARCH_FLAGS "")
if(EXAMOE_KOKKOS_HOST_ARCH)
  string(REPLACE ";" "," _kk "${EXAMOE_KOKKOS_HOST_ARCH}")
  set(EXAMOE_ARCH_SUMMARY "Kokkos_ARCH_${_kk} (Kokkos' flags; EXAMOE_ARCH=\"${EXAMOE_ARCH}\" not used)")
elseif(EXAMOE_ARCH)
  set(EXAMOE_ARCH_FLAGS "-march=${EXAMOE_ARCH}")
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("${EXAMOE_ARCH_FLAGS}" EXAMOE_ARCH_FLAG_WORKS_${EXAMOE_ARCH})
  if(NOT EXAMOE_ARCH_FLAG_WORKS_${EXAMOE_ARCH})
    message(FATAL_ERROR "EXAMOE_ARCH=${EXAMOE_ARCH}: ${CMAKE_CXX_COMPILER} rejects ${EXAMOE_ARCH_FLAGS}. Use a "
                        "-march value it knows (native, znver3, skylake-avx512, ...) or leave EXAMOE_ARCH empty.")
  endif()
  set(EXAMOE_ARCH_SUMMARY "${EXAMOE_ARCH_FLAGS} (EXAMOE_ARCH, ExaMoE's own code)")
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${EXAMOE_ARCH_FLAGS}>")
else()
  set(EXAMOE_ARCH_SUMMARY "compiler default (EXAMOE_ARCH empty)")
endif()

# Independent of the target: sqrt in a loop vectorises only when it need not
# set errno (AdamW's update, RMSNorm), and the host exp's selects
# (kernels/host_loops.hpp: SwiGLU, the softmax) only when a comparison may
# not raise a floating-point trap. Neither changes a value: ExaMoE never
# reads errno or the floating-point exception flags (no <cfenv>).
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>" "$<$<COMPILE_LANGUAGE:CXX>:-fno-trapping-math>")
endif()
