# Finds Kokkos (>= 3.4, 3.x or 4.x) and Kokkos Kernels and normalises them to
# two targets, ExaMoE::kokkos and ExaMoE::kokkoskernels, whatever config style
# provided them: Kokkos' own CMake package (standalone / Spack) or the TriBITS
# package Debian ships inside Trilinos.
#
# Debian 12's TriBITS KokkosConfig.cmake computes its include directory four
# levels above cmake/Kokkos, i.e. /usr/lib/include, which does not exist; the
# correct directory is in Kokkos_INCLUDE_DIRS. We repair our view of it here
# rather than touch the system file.

find_package(Kokkos 3.4 CONFIG REQUIRED)
if(NOT TARGET Kokkos::kokkos)
  message(FATAL_ERROR "Kokkos was found at ${Kokkos_DIR} but defines no Kokkos::kokkos target; "
                      "point Kokkos_ROOT at a Kokkos >= 3.4 install.")
endif()

get_target_property(_exa_kk_inc Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
set(_exa_kk_good_inc "")
foreach(_d IN LISTS _exa_kk_inc)
  if(_d MATCHES "^\\$<" OR EXISTS "${_d}/Kokkos_Core.hpp")
    list(APPEND _exa_kk_good_inc "${_d}")
  endif()
endforeach()
if(NOT _exa_kk_good_inc)
  # Broken config (Debian): fall back on the directory the config lists.
  foreach(_d IN LISTS Kokkos_INCLUDE_DIRS)
    get_filename_component(_d "${_d}" REALPATH)
    if(EXISTS "${_d}/Kokkos_Core.hpp")
      list(APPEND _exa_kk_good_inc "${_d}")
    endif()
  endforeach()
  if(NOT _exa_kk_good_inc)
    message(FATAL_ERROR "Kokkos config at ${Kokkos_DIR} lists no directory holding Kokkos_Core.hpp. "
                        "Set Kokkos_ROOT to a working Kokkos install.")
  endif()
  set(EXAMOE_KOKKOS_INCLUDE_FIXED TRUE)
endif()

add_library(ExaMoE_kokkos INTERFACE)
add_library(ExaMoE::kokkos ALIAS ExaMoE_kokkos)
if(EXAMOE_KOKKOS_INCLUDE_FIXED)
  # The imported target carries the bad path; take its libraries, not its includes.
  get_target_property(_exa_kk_libs Kokkos::kokkos INTERFACE_LINK_LIBRARIES)
  list(FILTER _exa_kk_libs EXCLUDE REGEX "^-D")
  target_link_libraries(ExaMoE_kokkos INTERFACE ${_exa_kk_libs})
  target_include_directories(ExaMoE_kokkos SYSTEM INTERFACE ${_exa_kk_good_inc})
else()
  target_link_libraries(ExaMoE_kokkos INTERFACE Kokkos::kokkos)
endif()

# Backends: read the generated KokkosCore_config.h, which both 3.x and 4.x install.
find_file(EXAMOE_KOKKOS_CONFIG_H KokkosCore_config.h PATHS ${_exa_kk_good_inc} ${Kokkos_INCLUDE_DIRS}
          NO_DEFAULT_PATH)
if(NOT EXAMOE_KOKKOS_CONFIG_H)
  find_file(EXAMOE_KOKKOS_CONFIG_H KokkosCore_config.h HINTS ${Kokkos_DIR}/../../../include ${Kokkos_DIR}/../../../include/trilinos)
endif()
file(STRINGS "${EXAMOE_KOKKOS_CONFIG_H}" _exa_kk_defs REGEX "^#define (KOKKOS_ENABLE_[A-Z_]+|KOKKOS_VERSION)")
set(EXAMOE_KOKKOS_BACKENDS "")
foreach(_b SERIAL OPENMP THREADS CUDA HIP SYCL)
  if(_exa_kk_defs MATCHES "#define KOKKOS_ENABLE_${_b}(;|$)")
    list(APPEND EXAMOE_KOKKOS_BACKENDS ${_b})
  endif()
endforeach()
string(REGEX MATCH "KOKKOS_VERSION ([0-9]+)" _m "${_exa_kk_defs}")
set(EXAMOE_KOKKOS_VERSION_NUM ${CMAKE_MATCH_1})
if(Kokkos_VERSION)
  set(EXAMOE_KOKKOS_VERSION ${Kokkos_VERSION})
else()
  math(EXPR _maj "${EXAMOE_KOKKOS_VERSION_NUM} / 10000")
  math(EXPR _min "${EXAMOE_KOKKOS_VERSION_NUM} / 100 % 100")
  math(EXPR _pat "${EXAMOE_KOKKOS_VERSION_NUM} % 100")
  set(EXAMOE_KOKKOS_VERSION "${_maj}.${_min}.${_pat}")
endif()
set(EXAMOE_ENABLE_CUDA OFF)
if("CUDA" IN_LIST EXAMOE_KOKKOS_BACKENDS)
  set(EXAMOE_ENABLE_CUDA ON)
endif()

# Kokkos Kernels: a standalone/Spack install exports Kokkos::kokkoskernels;
# Trilinos' TriBITS package exports trilinos_kokkoskernels.
find_package(KokkosKernels CONFIG REQUIRED)
add_library(ExaMoE_kokkoskernels INTERFACE)
add_library(ExaMoE::kokkoskernels ALIAS ExaMoE_kokkoskernels)
if(TARGET Kokkos::kokkoskernels)
  target_link_libraries(ExaMoE_kokkoskernels INTERFACE Kokkos::kokkoskernels)
elseif(TARGET trilinos_kokkoskernels)
  target_link_libraries(ExaMoE_kokkoskernels INTERFACE trilinos_kokkoskernels ExaMoE::kokkos)
else()
  message(FATAL_ERROR "KokkosKernels config at ${KokkosKernels_DIR} defines no known target.")
endif()
find_file(EXAMOE_KOKKOSKERNELS_CONFIG_H KokkosKernels_config.h PATHS ${_exa_kk_good_inc} ${KokkosKernels_INCLUDE_DIRS}
          HINTS ${KokkosKernels_DIR}/../../../include ${KokkosKernels_DIR}/../../../include/trilinos)
set(EXAMOE_KK_TPLS "")
if(EXAMOE_KOKKOSKERNELS_CONFIG_H)
  file(STRINGS "${EXAMOE_KOKKOSKERNELS_CONFIG_H}" _exa_kkk_defs REGEX "^#define KOKKOSKERNELS_ENABLE_TPL_")
  foreach(_t BLAS CBLAS MKL CUBLAS)
    if(_exa_kkk_defs MATCHES "KOKKOSKERNELS_ENABLE_TPL_${_t}(;|$)")
      list(APPEND EXAMOE_KK_TPLS ${_t})
    endif()
  endforeach()
endif()
