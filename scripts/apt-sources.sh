#!/usr/bin/env bash
# Adds the Debian 12 apt entries a CI leg needs, once:
#   deb-src  -> source packages (trilinos, for the OpenMP/CUDA Kokkos builds)
#   nonfree  -> contrib + non-free (nvidia-cuda-toolkit 11.8)
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
f=/etc/apt/sources.list.d/examoe-$1.sources
[ -f "$f" ] && exit 0
case "$1" in
  deb-src) entry="Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main" ;;
  nonfree) entry="Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: contrib non-free" ;;
  *) echo "apt-sources.sh: unknown entry '$1' (want deb-src or nonfree)" >&2; exit 1 ;;
esac
printf '%s\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$entry" | $SUDO tee "$f" >/dev/null
echo "[apt] added $f; updating package lists" >&2
$SUDO apt-get update -qq
