#!/usr/bin/env bash
# Builds the golden-file fuzzer with clang (libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer)
# in a build directory of its own and runs it for a bounded time. Exits non-zero on any finding: a
# crash, a sanitizer report, a leak, a slow input, or a round trip that does not hold.
#
# usage: fuzz/run.sh [SECONDS] [CORPUS_DIR] [extra libFuzzer flags ...]
#   SECONDS     fuzzing time (default 60)
#   CORPUS_DIR  seed corpus, only read (default: data/golden plus a few tiny valid files that the
#               fuzzer itself writes in its seed mode, MLAKIT_FUZZ_WRITE_SEEDS=DIR)
# environment: MLAKIT_FUZZ_BUILD_DIR (default build-fuzz), MLAKIT_FUZZ_JOBS (default 2)
# New inputs the run finds go to $MLAKIT_FUZZ_BUILD_DIR/fuzz-run/corpus, findings to .../artifacts.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
seconds=${1:-60}
corpus=${2:-}
shift $(($# < 2 ? $# : 2))
case $seconds in '' | *[!0-9]*) echo "run.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
if [[ -n $corpus && ! -d $corpus ]]; then echo "run.sh: no corpus directory '$corpus'" >&2; exit 2; fi

build=${MLAKIT_FUZZ_BUILD_DIR:-$root/build-fuzz}
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DMLAKIT_BUILD_FUZZERS=ON \
  -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_BENCH=OFF -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_ENABLE_CUDA=OFF > /dev/null
cmake --build "$build" --target safetensors_fuzz -j "${MLAKIT_FUZZ_JOBS:-2}"
fuzzer=$build/fuzz/safetensors_fuzz

work=$build/fuzz-run
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
seed_dirs=()
if [[ -n $corpus ]]; then
  seed_dirs+=("$corpus")
else
  MLAKIT_FUZZ_WRITE_SEEDS="$work/seeds" "$fuzzer"
  seed_dirs+=("$work/seeds")
  [[ -d $root/data/golden ]] && seed_dirs+=("$root/data/golden")
fi

# The first directory receives new inputs; the seed directories are only read.
status=0
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -dict="$here/safetensors.dict" -artifact_prefix="$work/artifacts/" \
  "$@" "$work/corpus" "${seed_dirs[@]}" || status=$?
findings=$(find "$work/artifacts" -type f | wc -l)
if [[ $status -ne 0 || $findings -ne 0 ]]; then
  echo "run.sh: FAILED (exit $status, $findings finding(s) in $work/artifacts)" >&2
  exit 1
fi
echo "run.sh: no findings in ${seconds} s ($(find "$work/corpus" -type f | wc -l) new corpus inputs)"
