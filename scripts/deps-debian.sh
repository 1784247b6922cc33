#!/usr/bin/env bash
# Installs the Debian 12 packages ExaMoE needs. Idempotent: prints nothing and
# touches nothing when every package is already present.
#
#   scripts/deps-debian.sh                    # the build and test dependencies
#   scripts/deps-debian.sh slurm-wlm munge    # these packages instead (the Slurm test)
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config git ca-certificates
  mpich libmpich-dev libhdf5-mpich-dev
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev
  libopenblas-dev googletest libgtest-dev libgmock-dev
  libtomlplusplus-dev libcli11-dev libfmt-dev libxxhash-dev libsentencepiece-dev libdnnl-dev
  libsodium-dev
  ocl-icd-opencl-dev  # Debian's dnnl-config.cmake requires OpenCL (its GPU runtime); only a recommends
  nlohmann-json3-dev libbenchmark-dev
  python3 python3-torch python3-h5py python3-numpy python3-matplotlib
)
[ $# -gt 0 ] && PKGS=("$@")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "[deps] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
