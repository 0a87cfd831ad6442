#!/usr/bin/env bash
# The whole test suite: build with warnings as errors, every C++ test (golden matrix at every
# ISA level this CPU has, validation, kernels, golden files), the installed-package consumer,
# the Python interop tests, and a bounded fuzzing run of the golden-file reader.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash scripts/setup.sh -DMLAKIT_WERROR=ON

echo "== C++ tests"
ctest --test-dir build --output-on-failure -j"$(nproc)"

echo "== installed package: find_package(mlakit) from a separate project"
prefix=$(mktemp -d)
cmake --install build --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build/consumer >/dev/null
./build/consumer/consumer

if [ -d tests/python ]; then
  echo "== Python interop (numpy, ml_dtypes, safetensors)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q -r tests/python/requirements.txt
  MLAKIT_BIN="$root/build/mlakit" .venv/bin/python -m pytest -q tests/python
fi

if [ -x fuzz/run.sh ] && command -v clang++ >/dev/null; then
  echo "== fuzzing the golden-file reader (bounded)"
  bash fuzz/run.sh "${MLAKIT_FUZZ_SECONDS:-60}"
fi
echo "== all tests passed"
