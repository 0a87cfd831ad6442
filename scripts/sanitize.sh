#!/usr/bin/env bash
# The C++ test programs under AddressSanitizer and UndefinedBehaviorSanitizer, built in
# build-sanitize/ (RelWithDebInfo, without the CUDA back-end and the benchmarks). Any report fails
# the run: out-of-bounds reads and writes, use after free, leaks, signed overflow, misaligned or
# null accesses, invalid shifts. Every test program runs as one process (ctest would start one per
# test, each paying the sanitizers' start-up). Slower than scripts/test.sh (about 18 minutes
# on 2 cores, nearly all of it the build), so it is not part of it; run it after changing kernels or
# validation. Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/packages.sh

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

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
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
