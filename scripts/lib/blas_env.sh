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
exa_blas_coretype() {
  local tag=$1 who=$2 python=${3:-/usr/bin/python3}
  if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "${BLAS_AUTODETECT:-0}" != 1 ]; then
    local core flags want=""
    core=$(OPENBLAS_VERBOSE=2 "$python" -c "import ctypes; ctypes.CDLL('libopenblas.so.0')" 2>&1 | sed -n 's/^Core: //p' || true)
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
