#!/usr/bin/env bash
# Builds the two fuzzers with clang (libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer) in a
# build directory of its own, the library included, and runs each for a bounded time:
#   safetensors_fuzz   the golden-file container reader and writer;
#   golden_file_fuzz   whole files through the operators' drivers (params, tensors, validation, a
#                      reference run and the comparison), seeded with data/golden and mutants of
#                      their params (fuzz/params_campaign.py --write-mutants).
# Exits non-zero on any finding: a crash, a sanitizer report, a leak, a slow input, a round trip
# that does not hold, or a refusal that is not one clean line.
#
# usage: fuzz/run.sh [SECONDS] [CORPUS_DIR] [extra libFuzzer flags ...]
#   SECONDS     fuzzing time of each fuzzer (default 60)
#   CORPUS_DIR  seed corpus of both, only read (default: as above, plus a few tiny valid files that
#               safetensors_fuzz writes in its seed mode, MLAKIT_FUZZ_WRITE_SEEDS=DIR)
# environment: MLAKIT_FUZZ_BUILD_DIR (default build-fuzz), MLAKIT_FUZZ_JOBS (default 2),
#              MLAKIT_FUZZ_TARGETS (default "safetensors_fuzz golden_file_fuzz")
# New inputs a run finds go to $MLAKIT_FUZZ_BUILD_DIR/fuzz-run/<fuzzer>/corpus, findings to
# .../<fuzzer>/artifacts.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
seconds=${1:-60}
corpus=${2:-}
shift $(($# < 2 ? $# : 2))
case $seconds in '' | *[!0-9]*) echo "run.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
if [[ -n $corpus && ! -d $corpus ]]; then echo "run.sh: no corpus directory '$corpus'" >&2; exit 2; fi

build=${MLAKIT_FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=${MLAKIT_FUZZ_TARGETS:-safetensors_fuzz golden_file_fuzz}
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
# The library is built with the sanitizers and libFuzzer's coverage hooks (no libFuzzer main:
# fuzzer-no-link); each fuzz target adds -fsanitize=fuzzer itself.
sanitize="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=all -fno-omit-frame-pointer"
# MLAKIT_FUZZ_CONFIGURED=1: $build is already configured with these flags and the fuzzers
# (scripts/sanitize.sh --ci shares its sanitizer build).
[[ ${MLAKIT_FUZZ_CONFIGURED:-0} == 1 ]] || cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DMLAKIT_BUILD_FUZZERS=ON \
  -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_BENCH=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_ENABLE_CUDA=OFF > /dev/null
# shellcheck disable=SC2086
cmake --build "$build" --target $targets -j "${MLAKIT_FUZZ_JOBS:-2}"

status=0
for target in $targets; do
  fuzzer=$build/fuzz/$target
  work=$build/fuzz-run/$target
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  seed_dirs=()
  dict=()
  if [[ -n $corpus ]]; then
    seed_dirs+=("$corpus")
  elif [[ $target == safetensors_fuzz ]]; then
    MLAKIT_FUZZ_WRITE_SEEDS="$work/seeds" "$fuzzer"
    seed_dirs+=("$work/seeds")
    [[ -d $root/data/golden ]] && seed_dirs+=("$root/data/golden")
  else
    python3 "$here/params_campaign.py" --write-mutants "$work/seeds" --per-op 3 --max-bytes 16384
    seed_dirs+=("$work/seeds" "$root/data/golden")
  fi
  [[ -f $here/$target.dict ]] && dict=(-dict="$here/$target.dict")
  [[ $target == safetensors_fuzz ]] && dict=(-dict="$here/safetensors.dict")
  # The first directory receives new inputs; the seed directories are only read.
  run_status=0
  "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=262144 -print_final_stats=1 \
    "${dict[@]}" -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" "${seed_dirs[@]}" || run_status=$?
  findings=$(find "$work/artifacts" -type f | wc -l)
  if [[ $run_status -ne 0 || $findings -ne 0 ]]; then
    echo "run.sh: $target FAILED (exit $run_status, $findings finding(s) in $work/artifacts)" >&2
    status=1
  else
    echo "run.sh: $target: no findings in ${seconds} s ($(find "$work/corpus" -type f | wc -l) new corpus inputs)"
  fi
done
exit $status
