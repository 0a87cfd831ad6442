#!/usr/bin/env bash
# Regenerates data/golden from data/golden/MANIFEST (one "op case seed" per line) with the
# reference back-end. The test suite checks that every file regenerates to identical bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${MLAKIT:-build/mlakit}
out=data/golden
rm -f "$out"/*.safetensors
while read -r op case seed; do
  [ -z "${op:-}" ] || [ "${op:0:1}" = "#" ] && continue
  "$exe" golden "$op" --case "$case" --seed "$seed" --out "$out/$op.$case.s$seed.safetensors" >/dev/null
done <"$out/MANIFEST"
du -sh "$out"
