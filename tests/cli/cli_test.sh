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

for op in $("$exe" golden --list | grep -E '^[a-z0-9_]+$'); do
  case_name=$("$exe" golden --list | awk -v op="$op" '$0 == op {f = 1; next} /^[a-z0-9_]+$/ {f = 0} f && /^  [a-z0-9_]+ / {print $1; exit}')
  expect_status 0 "golden $op --case $case_name" "$exe" golden "$op" --case "$case_name" --seed 5 --out "$tmp/$op.safetensors"
  expect_status 0 "check $op on the reference" "$exe" check "$tmp/$op.safetensors" --backend reference
  expect_status 0 "check $op on automatic" "$exe" check "$tmp/$op.safetensors"
  expect_status 0 "run $op" "$exe" run "$tmp/$op.safetensors" --out "$tmp/$op.run.safetensors" --backend automatic
  expect_status 0 "check $op --candidate" "$exe" check "$tmp/$op.safetensors" --candidate "$tmp/$op.run.safetensors"
done
expect_status 2 "golden bad --set" "$exe" golden lightning_indexer --set nosuchknob=3 --out "$tmp/z.safetensors"; one_line_error "bad knob"
expect_status 2 "golden --set of the wrong kind" "$exe" golden lightning_indexer --set num_heads=abc --out "$tmp/z.safetensors"
one_line_error "knob kind"
grep -q 'knob num_heads="abc"' "$tmp/err" || { echo "FAIL: the knob error does not name the knob"; fails=$((fails + 1)); }

# Files with broken params: one line naming the operator and the key, status 2, no output written.
set_param() {  # set_param IN OUT KEY JSON_VALUE (JSON_VALUE "-" drops the key)
  python3 - "$@" <<'PY'
import json, struct, sys
src, dst, key, value = sys.argv[1:5]
blob = open(src, "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
params = json.loads(header["__metadata__"]["params"])
if value == "-":
    params.pop(key, None)
else:
    params[key] = json.loads(value)
header["__metadata__"]["params"] = json.dumps(params)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
PY
}
refused_by_name() {  # refused_by_name OP KEY VALUE EXPECTED_TEXT
  local op=$1 key=$2 value=$3 text=$4
  set_param "$tmp/$op.safetensors" "$tmp/bad.safetensors" "$key" "$value"
  rm -f "$tmp/bad.out.safetensors"
  expect_status 2 "run $op with params.$key=$value" "$exe" run "$tmp/bad.safetensors" --out "$tmp/bad.out.safetensors"
  if [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -qF "mlakit: $op: $text" "$tmp/err"; then
    echo "FAIL: expected one line 'mlakit: $op: $text', got:"; cat "$tmp/err"; fails=$((fails + 1))
  fi
  [ ! -e "$tmp/bad.out.safetensors" ] || { echo "FAIL: a refused run wrote its output"; fails=$((fails + 1)); }
  expect_status 2 "check $op with params.$key=$value" "$exe" check "$tmp/bad.safetensors" --candidate "$tmp/$op.safetensors"
  grep -qF "mlakit: $op: $text" "$tmp/err" || { echo "FAIL: check's refusal differs:"; cat "$tmp/err"; fails=$((fails + 1)); }
}
refused_by_name fused_qkv_paged q_dim -5 "params.q_dim=-5 (expected an integer in [1, 2147483647])"
refused_by_name fused_qkv_paged q_dim 4294967296 "params.q_dim=4294967296 (expected an integer in [1, 2147483647])"
refused_by_name fused_qkv_paged weight_format '"int3"' 'params.weight_format="int3" (expected "dense", "fp8_block" or "gptq")'
refused_by_name lightning_indexer layer_idx - "params.layer_idx is missing"
refused_by_name lightning_indexer top_k '"8"' 'params.top_k="8"'
refused_by_name msa_block_indexer scale null "params.scale=null"
refused_by_name mla_prefill_fp8 bogus 1 "params.bogus=1 (not a parameter of mla_prefill_fp8"
refused_by_name sparse_mla_prefill num_q_heads 1099511627776 "params.num_q_heads=1099511627776"
# A dense weight needs no GPTQ keys.
set_param "$tmp/fused_qkv_paged.safetensors" "$tmp/nogptq.safetensors" group_size -
set_param "$tmp/nogptq.safetensors" "$tmp/nogptq.safetensors" has_zp -
expect_status 0 "check of a dense fused_qkv_paged file without GPTQ keys" "$exe" check "$tmp/nogptq.safetensors" --backend reference

if [ "$fails" -ne 0 ]; then echo "$fails CLI check(s) failed"; exit 1; fi
echo "all CLI checks passed"
