# Every third-party dependency except Kokkos (ExaMoEKokkos.cmake).

find_package(MPI 3.0 REQUIRED COMPONENTS CXX)

# Parallel HDF5: prefer the MPI flavour Debian installs next to mpich.
set(HDF5_PREFER_PARALLEL TRUE)
if(NOT HDF5_ROOT AND EXISTS /usr/lib/x86_64-linux-gnu/hdf5/mpich)
  set(HDF5_C_COMPILER_EXECUTABLE /usr/bin/h5pcc.mpich CACHE FILEPATH "")
endif()
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "HDF5 at ${HDF5_INCLUDE_DIRS} is serial. ExaMoE writes checkpoints through MPI-IO and "
                      "needs parallel HDF5 (Debian: libhdf5-mpich-dev; Spack: hdf5+mpi).")
endif()
# Verify H5_HAVE_PARALLEL in the header itself: FindHDF5's guess can be fooled.
find_file(EXAMOE_H5PUBCONF H5pubconf.h PATHS ${HDF5_INCLUDE_DIRS} NO_DEFAULT_PATH)
if(EXAMOE_H5PUBCONF)
  file(STRINGS "${EXAMOE_H5PUBCONF}" _h5par REGEX "^#define H5_HAVE_PARALLEL 1")
  if(NOT _h5par)
    message(FATAL_ERROR "${EXAMOE_H5PUBCONF} lacks H5_HAVE_PARALLEL: this HDF5 was built without MPI.")
  endif()
endif()
add_library(ExaMoE_hdf5 INTERFACE)
add_library(ExaMoE::hdf5 ALIAS ExaMoE_hdf5)
target_include_directories(ExaMoE_hdf5 SYSTEM INTERFACE ${HDF5_INCLUDE_DIRS})
target_link_libraries(ExaMoE_hdf5 INTERFACE ${HDF5_C_LIBRARIES} MPI::MPI_CXX)
target_compile_definitions(ExaMoE_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})

find_package(tomlplusplus REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)

find_package(PkgConfig QUIET)
find_path(XXHASH_INCLUDE_DIR xxhash.h)
find_library(XXHASH_LIBRARY NAMES xxhash)
if(NOT XXHASH_INCLUDE_DIR OR NOT XXHASH_LIBRARY)
  message(FATAL_ERROR "xxHash not found (Debian: libxxhash-dev; Spack: xxhash).")
endif()
add_library(ExaMoE_xxhash INTERFACE)
add_library(ExaMoE::xxhash ALIAS ExaMoE_xxhash)
target_include_directories(ExaMoE_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(ExaMoE_xxhash INTERFACE ${XXHASH_LIBRARY})

# SentencePiece: the subword tokenizers of examoe-tokenize (Debian:
# libsentencepiece-dev, which scripts/deps-debian.sh installs; Spack:
# sentencepiece). AUTO uses it when found and says so when not (the
# tokenizer functions then throw, naming the package); ON requires it.
set(EXAMOE_ENABLE_SENTENCEPIECE AUTO CACHE STRING "Subword tokenizers on SentencePiece: AUTO, ON or OFF")
set(EXAMOE_HAVE_SENTENCEPIECE OFF)
if(NOT EXAMOE_ENABLE_SENTENCEPIECE STREQUAL "OFF")
  find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h)
  find_library(SENTENCEPIECE_LIBRARY NAMES sentencepiece)
  find_library(SENTENCEPIECE_TRAIN_LIBRARY NAMES sentencepiece_train)
  if(SENTENCEPIECE_INCLUDE_DIR AND SENTENCEPIECE_LIBRARY AND SENTENCEPIECE_TRAIN_LIBRARY)
    set(EXAMOE_HAVE_SENTENCEPIECE ON)
    add_library(ExaMoE_sentencepiece INTERFACE)
    add_library(ExaMoE::sentencepiece ALIAS ExaMoE_sentencepiece)
    target_include_directories(ExaMoE_sentencepiece SYSTEM INTERFACE ${SENTENCEPIECE_INCLUDE_DIR})
    target_link_libraries(ExaMoE_sentencepiece INTERFACE ${SENTENCEPIECE_TRAIN_LIBRARY} ${SENTENCEPIECE_LIBRARY})
  elseif(EXAMOE_ENABLE_SENTENCEPIECE STREQUAL "ON")
    message(FATAL_ERROR "SentencePiece not found (Debian: libsentencepiece-dev; Spack: sentencepiece); install it "
                        "or configure with -DEXAMOE_ENABLE_SENTENCEPIECE=OFF")
  else()
    message(STATUS "SentencePiece not found: examoe-tokenize will refuse to train or encode "
                   "(Debian: libsentencepiece-dev; Spack: sentencepiece)")
  endif()
endif()

# oneDNN: the bf16 matrix products of precision.compute = "bf16" on host
# execution spaces (AVX512-BF16 / AMX; OpenBLAS has no bf16 GEMM). Debian:
# libdnnl-dev, which scripts/deps-debian.sh installs; Spack: onednn. AUTO
# uses it when found and says so when not (a bf16 deck is then refused,
# naming the package); ON requires it.
set(EXAMOE_ENABLE_ONEDNN AUTO CACHE STRING "bf16 host matmuls through oneDNN: AUTO, ON or OFF")
set(EXAMOE_HAVE_ONEDNN OFF)
if(EXAMOE_ENABLE_CUDA AND NOT EXAMOE_ENABLE_ONEDNN STREQUAL "ON")
  # A CUDA build's products run on the device, where oneDNN does not help.
  message(STATUS "oneDNN: not used in a CUDA build (precision.compute = \"bf16\" is refused there)")
elseif(NOT EXAMOE_ENABLE_ONEDNN STREQUAL "OFF")
  find_package(dnnl CONFIG QUIET)
  if(dnnl_FOUND)
    set(EXAMOE_HAVE_ONEDNN ON)
  elseif(EXAMOE_ENABLE_ONEDNN STREQUAL "ON")
    message(FATAL_ERROR "oneDNN not found (Debian: libdnnl-dev; Spack: onednn); install it "
                        "or configure with -DEXAMOE_ENABLE_ONEDNN=OFF")
  else()
    message(STATUS "oneDNN not found: precision.compute = \"bf16\" will be refused "
                   "(Debian: libdnnl-dev; Spack: onednn)")
  endif()
endif()

# libsodium: X25519, BLAKE2b and ChaCha20 for the secure aggregation of
# federated training (federated.secure). Debian: libsodium-dev, which
# scripts/deps-debian.sh installs; Spack: libsodium. AUTO uses it when found
# and says so when not (federated.secure = true is then refused, naming the
# package); ON requires it.
set(EXAMOE_ENABLE_SODIUM AUTO CACHE STRING "Secure aggregation on libsodium: AUTO, ON or OFF")
set(EXAMOE_HAVE_SODIUM OFF)
if(NOT EXAMOE_ENABLE_SODIUM STREQUAL "OFF")
  find_path(SODIUM_INCLUDE_DIR sodium.h)
  find_library(SODIUM_LIBRARY NAMES sodium)
  if(SODIUM_INCLUDE_DIR AND SODIUM_LIBRARY)
    set(EXAMOE_HAVE_SODIUM ON)
    add_library(ExaMoE_sodium INTERFACE)
    add_library(ExaMoE::sodium ALIAS ExaMoE_sodium)
    target_include_directories(ExaMoE_sodium SYSTEM INTERFACE ${SODIUM_INCLUDE_DIR})
    target_link_libraries(ExaMoE_sodium INTERFACE ${SODIUM_LIBRARY})
  elseif(EXAMOE_ENABLE_SODIUM STREQUAL "ON")
    message(FATAL_ERROR "libsodium not found (Debian: libsodium-dev; Spack: libsodium); install it "
                        "or configure with -DEXAMOE_ENABLE_SODIUM=OFF")
  else()
    message(STATUS "libsodium not found: federated.secure = true will be refused "
                   "(Debian: libsodium-dev; Spack: libsodium)")
  endif()
endif()

# exa_link_optional(<target> <found> <macro> <imported target>): an optional
# dependency of <target>'s own sources (SentencePiece, oneDNN): linked
# privately and <macro>=1 when <found>, else <macro>=0 (the sources then
# refuse, naming the package).
function(exa_link_optional target found macro imported)
  if(found)
    target_link_libraries(${target} PRIVATE ${imported})
    target_compile_definitions(${target} PRIVATE ${macro}=1)
  else()
    target_compile_definitions(${target} PRIVATE ${macro}=0)
  endif()
endfunction()

# CBLAS is only used by the gemm benchmark's baseline, never by the library.
find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
find_library(OPENBLAS_LIBRARY NAMES openblas)

if(EXAMOE_ENABLE_TESTS)
  find_package(GTest REQUIRED)
  # The reference tests need Debian's python3-torch, which lives under the
  # system interpreter, not under a pyenv/conda one earlier on PATH.
  if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python with torch and h5py")
  endif()
  find_package(Python3 COMPONENTS Interpreter)
endif()
if(EXAMOE_ENABLE_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

set(EXAMOE_HAVE_NCCL OFF)
if(EXAMOE_ENABLE_CUDA AND EXAMOE_ENABLE_NCCL)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS $ENV{NCCL_ROOT}/include /usr/local/cuda/include)
  find_library(NCCL_LIBRARY nccl HINTS $ENV{NCCL_ROOT}/lib /usr/local/cuda/lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(EXAMOE_HAVE_NCCL ON)
    add_library(ExaMoE_nccl INTERFACE)
    add_library(ExaMoE::nccl ALIAS ExaMoE_nccl)
    # nccl.h may sit next to a newer CUDA's headers (/usr/local/cuda/include)
    # than the CUDA compiler's; putting that directory on the include path
    # would shadow the compiler's own cuda_runtime.h. Copy nccl.h alone into
    # the build tree and include it from there.
    set(_exa_nccl_inc ${PROJECT_BINARY_DIR}/nccl-include)
    configure_file(${NCCL_INCLUDE_DIR}/nccl.h ${_exa_nccl_inc}/nccl.h COPYONLY)
    target_include_directories(ExaMoE_nccl SYSTEM INTERFACE ${_exa_nccl_inc})
    target_link_libraries(ExaMoE_nccl INTERFACE ${NCCL_LIBRARY})
  else()
    # A CUDA build without NCCL would move every GPU collective through
    # host copies: refuse rather than compile it out silently.
    message(FATAL_ERROR "EXAMOE_ENABLE_CUDA=ON needs NCCL (nccl.h and libnccl; found include '${NCCL_INCLUDE_DIR}', "
                        "library '${NCCL_LIBRARY}'). Set NCCL_ROOT to its prefix, install it (e.g. Spack's nccl, "
                        "or CUDA's /usr/local/cuda), or configure with -DEXAMOE_ENABLE_NCCL=OFF to use MPI for "
                        "every collective.")
  endif()
endif()
