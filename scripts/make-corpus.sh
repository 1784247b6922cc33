#!/usr/bin/env bash
# Regenerates data/corpus.txt, ExaMoE's bundled default training corpus, from
# Debian 12's `jargon-text` package (The Jargon File 4.4.7, public domain).
# The result is committed, so users never need to run this; it exists so the
# corpus can be audited and rebuilt byte for byte.
#
#   scripts/make-corpus.sh            # writes data/corpus.txt
#   scripts/make-corpus.sh OUT.txt    # writes elsewhere
#
# Source: /usr/share/doc/jargon-text/jargon.txt.gz when the package is
# installed; otherwise the .deb is fetched with `apt-get download` (no root
# needed) and unpacked into a temporary directory.
#
# Cleaning, all deterministic (no locale-dependent transliteration):
#   1. map every non-ASCII character the file uses to an ASCII spelling
#      (curly quotes -> straight, box drawing -> - | + =, accents dropped,
#      Greek letters spelt out); fail if anything non-ASCII is left, so a
#      new package version cannot silently change the byte alphabet;
#   2. drop the 3-space indentation of the body and trailing blanks
#      (whitespace a byte-level model would otherwise spend capacity on);
#   3. squeeze runs of blank lines to one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/data/corpus.txt}
pkg=jargon-text
want_version=4.4.7-4.1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

src=/usr/share/doc/$pkg/jargon.txt.gz
version=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
if [[ ! -f $src ]]; then
  (cd "$tmp" && apt-get download "$pkg" >/dev/null) || {
    echo "make-corpus: cannot get $pkg: run 'apt-get update' or 'apt-get install $pkg' first" >&2
    exit 1
  }
  deb=$(ls "$tmp"/${pkg}_*.deb)
  dpkg-deb -x "$deb" "$tmp/root"
  version=$(dpkg-deb -f "$deb" Version)
  src=$tmp/root/usr/share/doc/$pkg/jargon.txt.gz
fi
if [[ $version != "$want_version" ]]; then
  echo "make-corpus: warning: $pkg is $version, data/README.md documents $want_version" >&2
fi

zcat "$src" | perl -CSD -Mutf8 -ne '
  BEGIN {
    %m = (
      "\x{00A0}" => " ",   "\x{201C}" => "\"",  "\x{201D}" => "\"",
      "\x{2018}" => "\x27", "\x{2019}" => "\x27", "\x{00B4}" => "\x27",
      "\x{00B7}" => "-",   "\x{2014}" => "--",  "\x{2212}" => "-",
      "\x{2022}" => "*",   "\x{2192}" => "->",  "\x{2190}" => "<-",
      "\x{21D4}" => "<=>", "\x{00A9}" => "(C)", "\x{2122}" => "(TM)",
      "\x{00AE}" => "(R)", "\x{00D7}" => "x",   "\x{00B1}" => "+/-",
      "\x{00A3}" => "GBP", "\x{00B5}" => "u",   "\x{223C}" => "~",
      "\x{2205}" => "{}",  "\x{2295}" => "(+)", "\x{2297}" => "(x)",
      "\x{3008}" => "<",   "\x{3009}" => ">",   "\x{00D8}" => "O",
      "\x{00E6}" => "ae",  "\x{00DF}" => "ss",
      "\x{03B1}" => "alpha", "\x{03BA}" => "kappa", "\x{03BB}" => "lambda",
      "\x{039B}" => "Lambda", "\x{03BD}" => "nu", "\x{03BF}" => "o",
      "\x{03C0}" => "pi",  "\x{03C1}" => "rho", "\x{03B9}" => "iota",
      "\x{00F6}" => "o",   "\x{00FC}" => "u",   "\x{00E4}" => "a",
      "\x{00E9}" => "e",   "\x{00E8}" => "e",   "\x{00EA}" => "e",
      "\x{00EF}" => "i",   "\x{00E0}" => "a",   "\x{00C9}" => "E",
      "\x{2500}" => "-",   "\x{2550}" => "=",   "\x{2502}" => "|",
    );
    $m{$_} = "+" for map { chr } (0x250C, 0x2510, 0x2514, 0x2518, 0x251C, 0x2524, 0x252C, 0x2534, 0x253C);
  }
  s/([^\x00-\x7F])/exists $m{$1} ? $m{$1} : die sprintf("make-corpus: unmapped character U+%04X on line %d\n", ord $1, $.)/ge;
  s/^   //;
  s/[ \t]+$//;
  print;
' | cat -s > "$tmp/corpus.txt"

mkdir -p "$(dirname "$out")"
mv "$tmp/corpus.txt" "$out"
echo "make-corpus: wrote $out ($(wc -c < "$out") bytes) from $pkg $version" >&2
sha256sum "$out" >&2
