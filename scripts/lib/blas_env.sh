# shellcheck shell=bash
# Sourced by the benchmark scripts (scripts/bench.sh, scripts/bench_overlap.sh):
# choose OpenBLAS's kernels for a benchmark.
#
# Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) does not recognise some recent
# CPUs (e.g. Sapphire Rapids under a hypervisor) and falls back to its
# generic "Prescott" SSE3 kernels, ~5x slower than its AVX-512 ones on the
# same core; a benchmark would then measure a machine nobody runs on.
#
#   exa_blas_coretype TAG WHO [PYTHON]
#
# When OPENBLAS_CORETYPE is unset, BLAS_AUTODETECT is not 1 and OpenBLAS
# picks Prescott on a CPU with AVX-512 (AVX2), exports
# OPENBLAS_CORETYPE=SkylakeX (Haswell) and says so on stderr as
# "[TAG] ... for WHO ...". PYTHON (default /usr/bin/python3) loads
# libopenblas.so.0 to ask OpenBLAS which core it picked.
#
# When OPENBLAS_CORETYPE is already set (a site's or a container's
# environment may set it), it is kept, and the script says which kernels
# OpenBLAS would have chosen without it when they differ: on an AVX-512
# CPU a Haswell setting halves the sgemm rate, for both frameworks, which
# moves MFU and the ratio (docs/performance.md).
# The kernels ("Core: ...") OpenBLAS reports choosing when PYTHON loads it.
exa_openblas_core() {
  OPENBLAS_VERBOSE=2 "$1" -c "import ctypes; ctypes.CDLL('libopenblas.so.0')" 2>&1 | sed -n 's/^Core: //p' || true
}

exa_blas_coretype() {
  local tag=$1 who=$2 python=${3:-/usr/bin/python3}
  if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    local own
    own=$(unset OPENBLAS_CORETYPE; exa_openblas_core "$python")
    if [ -n "$own" ] && [ "$own" != "$OPENBLAS_CORETYPE" ]; then
      echo "[$tag] OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE comes from the environment and is kept for $who;" \
           "OpenBLAS alone would choose $own here (env -u OPENBLAS_CORETYPE to measure that)" >&2
    fi
  elif [ "${BLAS_AUTODETECT:-0}" != 1 ]; then
    local core flags want=""
    core=$(exa_openblas_core "$python")
    flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
    case " $flags " in
      *" avx512f "*) want=SkylakeX ;;
      *" avx2 "*) want=Haswell ;;
    esac
    if [ "$core" = Prescott ] && [ -n "$want" ]; then
      export OPENBLAS_CORETYPE=$want
      echo "[$tag] OpenBLAS chose its generic Prescott kernels on this $want-class CPU:" \
           "setting OPENBLAS_CORETYPE=$want for $who (BLAS_AUTODETECT=1 to keep Prescott)" >&2
    fi
  fi
}
