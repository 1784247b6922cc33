#!/usr/bin/env bash
# Installs Debian 12's Slurm (controller, node daemon, client commands) and
# MUNGE, for the single-node Slurm test (tests/batch/slurm_requeue.sh).
# Idempotent: prints nothing and touches nothing when both are present.
# Not part of scripts/deps-debian.sh: nothing but that test needs them.
set -euo pipefail
PKGS=(slurm-wlm munge)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "[deps] installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The packages' postinst scripts try to start their services; there is no
# init system here (the test starts the daemons itself), so that is refused.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
