#!/usr/bin/env bash
# The mlakit command: help everywhere, one clear line and status 2 for bad arguments, info,
# and a golden -> check -> run -> check round trip for every operator.
set -uo pipefail
exe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect_status() {  # expect_status WANT description command...
  local want=$1 what=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: status $got, expected $want"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1))
  else
    echo "ok: $what"
  fi
}
one_line_error() {
  if [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^mlakit: error: ' "$tmp/err"; then
    echo "FAIL: $1: expected one 'mlakit: error:' line, got:"; cat "$tmp/err"; fails=$((fails + 1))
  fi
}

expect_status 0 "--help" "$exe" --help
for sub in info golden run check; do expect_status 0 "$sub --help" "$exe" "$sub" --help; done
expect_status 2 "unknown option" "$exe" --bogus; one_line_error "unknown option"
expect_status 2 "unknown sub-command argument" "$exe" info extra; one_line_error "extra argument"
expect_status 2 "golden without operator" "$exe" golden --out "$tmp/x.safetensors"; one_line_error "golden without op"
expect_status 2 "golden unknown operator" "$exe" golden nosuchop --out "$tmp/x.safetensors"; one_line_error "unknown op"
expect_status 2 "run of a missing file" "$exe" run "$tmp/missing.safetensors" --out "$tmp/y"; one_line_error "missing file"
printf 'not a safetensors file' >"$tmp/bad.safetensors"
expect_status 2 "check of a malformed file" "$exe" check "$tmp/bad.safetensors"; one_line_error "malformed file"
expect_status 0 "info" "$exe" info
grep -q "isa in use" "$tmp/out" || { echo "FAIL: info lacks the ISA line"; fails=$((fails + 1)); }
expect_status 0 "golden --list" "$exe" golden --list

for op in $("$exe" golden --list | grep -E '^[a-z_]+$'); do
  case_name=$("$exe" golden --list | awk -v op="$op" '$0 == op {f = 1; next} /^[a-z_]+$/ {f = 0} f && /^  [a-z0-9_]+ / {print $1; exit}')
  expect_status 0 "golden $op --case $case_name" "$exe" golden "$op" --case "$case_name" --seed 5 --out "$tmp/$op.safetensors"
  expect_status 0 "check $op on the reference" "$exe" check "$tmp/$op.safetensors" --backend reference
  expect_status 0 "check $op on automatic" "$exe" check "$tmp/$op.safetensors"
  expect_status 0 "run $op" "$exe" run "$tmp/$op.safetensors" --out "$tmp/$op.run.safetensors" --backend automatic
  expect_status 0 "check $op --candidate" "$exe" check "$tmp/$op.safetensors" --candidate "$tmp/$op.run.safetensors"
done
expect_status 2 "golden bad --set" "$exe" golden lightning_indexer --set nosuchknob=3 --out "$tmp/z.safetensors"; one_line_error "bad knob"

if [ "$fails" -ne 0 ]; then echo "$fails CLI check(s) failed"; exit 1; fi
echo "all CLI checks passed"
