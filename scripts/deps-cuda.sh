#!/usr/bin/env bash
# Debian non-free's CUDA 11.8 toolkit and g++-11 (nvcc 11.8's newest host
# compiler), for the CUDA compile leg. Idempotent; quiet when present.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
missing=()
for p in nvidia-cuda-toolkit g++-11 gcc-11; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
"$here/apt-sources.sh" nonfree
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "[deps] installing ${missing[*]} (about 3 GB)"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
