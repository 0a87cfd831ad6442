#!/usr/bin/env bash
# The C++ test programs under AddressSanitizer and UndefinedBehaviorSanitizer, built in
# build-sanitize/ (RelWithDebInfo, without the CUDA back-end and the benchmarks). Any report fails
# the run: out-of-bounds reads and writes, use after free, leaks, signed overflow, misaligned or
# null accesses, invalid shifts. Every test program runs as one process (ctest would start one per
# test, each paying the sanitizers' start-up). The whole run takes about 18 minutes on 2 cores,
# nearly all of it the build; run it after changing kernels or validation. Extra arguments go to
# CMake's configure step.
#
# --ci: the part scripts/test.sh runs, sized for CI. One clang build in build-sanitize-ci/ with the
# sanitizers and libFuzzer's coverage hooks serves both: the tests that take files and bad input
# (every operator's validation tests, one golden-matrix seed per operator and case, the golden-file
# and params tests, the command line) run under the sanitizers, then fuzz/run.sh runs both
# fuzzers on the same build for MLAKIT_FUZZ_SECONDS each (default 60). The simd/ kernel objects
# are built without the sanitizers there (they took two thirds of the build); everything that
# reads files, validates and schedules is instrumented.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/packages.sh

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

if [ "${1:-}" = "--ci" ]; then
  shift
  build=build-sanitize-ci
  # -O1 with line tables: a third of RelWithDebInfo's build time on 2 cores, stack traces kept.
  flags="-O1 -gline-tables-only -fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=all"
  flags="$flags -fno-omit-frame-pointer"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DMLAKIT_ENABLE_CUDA=OFF -DMLAKIT_BUILD_BENCH=OFF -DMLAKIT_BUILD_FUZZERS=ON \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DMLAKIT_SIMD_EXTRA_OPTIONS=-fno-sanitize=all "$@" >/dev/null
  ops=(lightning_indexer msa_block_indexer mla_prefill_fp8 sparse_mla_prefill fused_qkv_paged)
  cmake --build "$build" -j"$(nproc)" --target mlakit_cli test_core test_whole "${ops[@]/#/test_}" safetensors_fuzz golden_file_fuzz
  failed=0
  run() {  # run NAME COMMAND...: one sanitized program, its last line shown
    local name=$1 log
    shift
    log=$(mktemp)
    if "$@" >"$log" 2>&1; then
      echo "ok    $name ($(grep -E '^\[  PASSED  \]|passed' "$log" | tail -1))"
    else
      echo "FAIL  $name (log: $log)"
      grep -m 20 -E 'ERROR: (Address|Leak)Sanitizer|runtime error|^\[  FAILED  \]|FAIL' "$log" || true
      failed=1
    fi
  }
  for op in "${ops[@]}"; do
    run "test_$op (validation, golden matrix seed 1)" "$build/tests/test_$op" --gtest_filter='*Validation*:*GoldenMatrix*seed1*'
  done
  run "test_core (file readers, params, sizes)" "$build/tests/test_core" \
    --gtest_filter='*Safetensors*:ParamReader*:ToleranceReader*:CheckTensors*:CheckedSizes*:MergeKnobs*'
  run "test_whole (golden files, params)" "$build/tests/test_whole" --gtest_filter='-CudaSmoke*'
  run "command line" bash tests/cli/cli_test.sh "$build/mlakit"
  if [ "$failed" -ne 0 ]; then exit 1; fi
  echo "== sanitizers: no report in the CI subset"
  MLAKIT_FUZZ_BUILD_DIR="$build" MLAKIT_FUZZ_CONFIGURED=1 bash fuzz/run.sh "${MLAKIT_FUZZ_SECONDS:-60}"
  exit 0
fi

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -Wno-clobbered: with ASan, GCC warns that a local live across the CUDA emulator's getcontext
# might be clobbered, as if it could return twice like setjmp; it cannot there: makecontext
# points each saved context at a new fiber before it is used (tests/cuda_emulation/emulator.cpp).
# ASan also prints, once, that it does not fully support swapcontext; the emulator's tests pass.
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLAKIT_ENABLE_CUDA=OFF \
  -DMLAKIT_BUILD_BENCH=OFF -DMLAKIT_WERROR=ON -DCMAKE_CXX_FLAGS="$flags -Wno-clobbered" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  "$@"
cmake --build build-sanitize -j"$(nproc)"

logs=$(mktemp -d)
failed=0
for t in build-sanitize/tests/test_*; do
  [ -x "$t" ] && [ -f "$t" ] || continue
  name=$(basename "$t")
  if "$t" >"$logs/$name.log" 2>&1; then
    echo "ok    $name ($(grep -E '^\[  PASSED  \]' "$logs/$name.log" | sed 's/\[  PASSED  \] //'))"
  else
    echo "FAIL  $name (log: $logs/$name.log)"
    grep -m 20 -E 'ERROR: (Address|Leak)Sanitizer|runtime error|^\[  FAILED  \]' "$logs/$name.log" || true
    failed=1
  fi
done
[ "$failed" -eq 0 ] && echo "== sanitizers: no report"
exit "$failed"
