#!/usr/bin/env bash
# The Spack leg (scripts/test.sh spack): ExaMoE's Spack package (spack/)
# with a real Spack, offline. Uses the Spack checkout EXAMOE_SPACK names
# (by default the offline snapshot CI keeps beside the checkout, the
# snapshot= line below), copied to a scratch directory with a scratch
# configuration (never ~/.spack). Without one the leg exits 77, which
# scripts/test.sh reports as skipped, neither passed nor failed:
#
#   1. Debian's packages registered as externals (Kokkos 3.4.1 Serial, Kokkos
#      Kernels, MPICH, parallel HDF5, CMake, make, the header libraries);
#   2. `spack spec` of examoe, examoe+openmp, examoe+libsodium and examoe+cuda
#      cuda_arch=80 (+openmp and +cuda concretize Kokkos to build: nothing is
#      built), and the
#      package's two conflicts (+nccl without +cuda, +cuda without cuda_arch);
#   3. the environment spack/spack.yaml concretized, and `spack dev-build
#      examoe@develop` of a copy of the working tree;
#   4. the installed examoe: --version and a short 2-rank training run.
#
# Environment: EXAMOE_SPACK (the snapshot), EXAMOE_SPACK_WORK (scratch
# directory, default a new one under /tmp, removed at the end unless
# EXAMOE_SPACK_KEEP=1), JOBS (build jobs, default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
snapshot=${EXAMOE_SPACK:-$root/../shared/tools/spack}
if [ ! -x "$snapshot/bin/spack" ]; then
  echo "[spack] SKIPPED: no Spack at $snapshot (set EXAMOE_SPACK to a Spack checkout to run this leg)"
  exit 77
fi
"$root/scripts/deps-debian.sh"
work=${EXAMOE_SPACK_WORK:-$(mktemp -d /tmp/examoe-spack.XXXXXX)}
[ "${EXAMOE_SPACK_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
t0=$SECONDS
phase() { echo "[spack] $(printf '%4d' $((SECONDS - t0))) s: $*"; }

# Spack writes into its own tree; the snapshot is read-only.
rm -rf "$work/spack"
cp -a "$snapshot" "$work/spack"
chmod -R u+w "$work/spack"
# The compiler wrappers' aliases (gcc -> ../cc, ...) are symlinks in Spack's
# git tree; a copy that lost them holds their targets as text: relink.
find "$work/spack/lib/spack/env" -type f -size -64c | while read -r f; do
  t=$(cat "$f")
  [ -n "$t" ] && [ -e "$(dirname "$f")/$t" ] && ln -sf "$t" "$f"
done
export SPACK_DISABLE_LOCAL_CONFIG=1 SPACK_USER_CACHE_PATH=$work/cache
cfg=$work/config
mkdir -p "$cfg"
cat >"$cfg/config.yaml" <<YAML
config:
  install_tree:
    root: $work/opt
  build_stage: [$work/stage]
  source_cache: $work/source-cache
  misc_cache: $work/misc-cache
  build_jobs: ${JOBS:-2}
YAML
cat >"$cfg/repos.yaml" <<YAML
repos:
- $root/spack
YAML
# Versions in Spack's spelling (Kokkos 3.4.1 is 3.4.01). Kokkos and Kokkos
# Kernels stay buildable so that the +openmp and +cuda specs concretize.
external() {  # external NAME SPEC PREFIX [buildable]
  printf '  %s:\n    buildable: %s\n    externals:\n    - spec: %s\n      prefix: %s\n' "$1" "${4:-false}" "$2" "$3"
}
hdf5_prefix=/usr/lib/x86_64-linux-gnu/hdf5/mpich
{
  printf 'packages:\n  all:\n    providers:\n      mpi: [mpich]\n  mpi:\n    buildable: false\n'
  external kokkos "kokkos@3.4.01 +serial ~openmp ~cuda ~threads ~shared" /usr true
  external kokkos-kernels "kokkos-kernels@3.4.01 +serial ~openmp ~cuda" /usr true
  external mpich "mpich@$(dpkg-query -W -f='${Version}' mpich | sed 's/-.*//')" /usr
  external hdf5 "hdf5@$(dpkg-query -W -f='${Version}' libhdf5-mpich-dev | sed 's/+.*//') +mpi ~cxx ~fortran" "$hdf5_prefix"
  external cmake "cmake@$(cmake --version | sed -n 's/^cmake version //p')" /usr
  external gmake "gmake@$(make --version | sed -n '1s/^GNU Make //p')" /usr
  external tomlplusplus "tomlplusplus@$(dpkg-query -W -f='${Version}' libtomlplusplus-dev | sed 's/+.*//')" /usr
  external cli11 "cli11@$(dpkg-query -W -f='${Version}' libcli11-dev | sed 's/+.*//')" /usr
  external fmt "fmt@$(dpkg-query -W -f='${Version}' libfmt-dev | sed 's/+.*//')" /usr
  external xxhash "xxhash@$(dpkg-query -W -f='${Version}' libxxhash-dev | sed 's/-.*//')" /usr
  external nlohmann-json "nlohmann-json@$(dpkg-query -W -f='${Version}' nlohmann-json3-dev | sed 's/-.*//')" /usr
  external googletest "googletest@$(dpkg-query -W -f='${Version}' googletest | sed 's/-.*//')" /usr
  external benchmark "benchmark@$(dpkg-query -W -f='${Version}' libbenchmark-dev | sed 's/-.*//')" /usr
  external onednn "onednn@$(dpkg-query -W -f='${Version}' libdnnl-dev | sed 's/-.*//') cpu_runtime=omp" /usr
  external libsodium "libsodium@$(dpkg-query -W -f='${Version}' libsodium-dev | sed 's/-.*//')" /usr
} >"$cfg/packages.yaml"
# The original concretizer: clingo cannot be bootstrapped offline.
spack() { "$work/spack/bin/spack" -C "$cfg" -c config:concretizer:original "$@"; }

spack compiler find --scope=site >/dev/null
phase "Spack $(spack --version) set up in $work, compilers: $(spack compilers 2>/dev/null | grep -o '[a-z]*@[0-9.]*' | tr '\n' ' ')"

spec_of() {  # spec_of SPEC...: concretizes; prints the tree
  spack spec -I "$@" >"$work/spec.out" 2>&1 || { cat "$work/spec.out" >&2; return 1; }
  sed -n '/^Concretized/,$p' "$work/spec.out" | cut -c1-160
}
spec_of examoe
# Everything external ([e]): nothing to build but examoe itself.
if grep -E '^ -  +\^' "$work/spec.out" >&2; then
  echo "[spack] FAIL: the default spec wants to build the dependencies above" >&2
  exit 1
fi
phase "spec examoe: every dependency external"
spec_of examoe+openmp | grep -E 'examoe|kokkos'
grep -q '\^kokkos@[0-9.]*%[^ ]*+openmp\|\^kokkos@.*~hpx.*+openmp' "$work/spec.out" ||
  { echo "[spack] FAIL: examoe+openmp does not ask Kokkos for OpenMP" >&2; exit 1; }
phase "spec examoe+openmp: Kokkos and Kokkos Kernels +openmp"
spec_of examoe+libsodium | grep -E 'examoe|libsodium'
grep -q '\^libsodium@' "$work/spec.out" || { echo "[spack] FAIL: examoe+libsodium does not depend on libsodium" >&2; exit 1; }
phase "spec examoe+libsodium: libsodium (federated.secure's secure aggregation)"
# CUDA 12 builds with Debian's gcc 12 (Spack would pick 11.8, which wants gcc <= 11).
spec_of examoe+cuda cuda_arch=80 ^cuda@12 | grep -E 'examoe|kokkos|cuda@'
kokkos_line=$(grep '\^kokkos@' "$work/spec.out")
for want in '+cuda[~+ ]' '+cuda_lambda' '+wrapper' ' cuda_arch=80 '; do
  grep -q -- "$want" <<<"$kokkos_line" || { echo "[spack] FAIL: examoe+cuda cuda_arch=80: Kokkos lacks '$want'" >&2; exit 1; }
done
grep -q '\^kokkos-kernels@.*+cuda' "$work/spec.out" || { echo "[spack] FAIL: Kokkos Kernels lacks +cuda" >&2; exit 1; }
phase "spec examoe+cuda cuda_arch=80: Kokkos +cuda +cuda_lambda +wrapper cuda_arch=80"
for bad in "examoe+nccl|NCCL collectives need the CUDA backend" "examoe+cuda ^cuda@12|needs a GPU architecture"; do
  if spack spec ${bad%%|*} >"$work/spec.out" 2>&1 || ! grep -q "${bad#*|}" "$work/spec.out"; then
    cat "$work/spec.out" >&2
    echo "[spack] FAIL: 'spack spec ${bad%%|*}' did not fail with '${bad#*|}'" >&2
    exit 1
  fi
done
phase "conflicts: +nccl~cuda and +cuda without cuda_arch refused"

# The working tree as it is (tracked and untracked files), copied so that
# Spack's files (.spack-env/, the build-<arch>-<hash> link) stay out of the
# checkout.
rm -rf "$work/src"
mkdir -p "$work/src"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -cf - -T -) | tar -xf - -C "$work/src"
spack -e "$work/src/spack" concretize >"$work/env.out" 2>&1 || { cat "$work/env.out" >&2; exit 1; }
grep -q 'examoe@develop.*+openmp' "$work/env.out" || { cat "$work/env.out" >&2; echo "[spack] FAIL: spack/spack.yaml" >&2; exit 1; }
phase "environment spack/spack.yaml concretizes (examoe +openmp from the checkout)"

(cd "$work/src" && spack dev-build -q examoe@develop) >"$work/dev-build.log" 2>&1 ||
  { tail -n 60 "$work/dev-build.log" >&2; echo "[spack] FAIL: spack dev-build (log above)" >&2; exit 1; }
prefix=$(spack location -i examoe)
phase "dev-build examoe@develop: installed in $prefix"

"$prefix/bin/examoe" --version
[ -x "$prefix/share/examoe/batch/slurm-cpu.sbatch" ] || { echo "[spack] FAIL: no batch scripts under $prefix/share" >&2; exit 1; }
(cd "$root" && mpiexec -n 2 "$prefix/bin/examoe" input/tiny.toml --set train.steps=4 --set train.log_every=2 \
   --set train.eval_every=4 --set train.eval_batches=1 --set checkpoint.every=4 --set output.run_dir="$work/run" \
   --set precision.compute=bf16) \
  >"$work/train.log" 2>&1 || { cat "$work/train.log" >&2; echo "[spack] FAIL: the installed examoe did not train" >&2; exit 1; }
grep -E '^step ' "$work/train.log"
[ -f "$work/run/ckpt/step_00000004/state.h5" ] || { echo "[spack] FAIL: no step-4 checkpoint" >&2; exit 1; }
phase "installed examoe trained 4 steps on 2 ranks and wrote its checkpoint"
