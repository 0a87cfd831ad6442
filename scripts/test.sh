#!/usr/bin/env bash
# The whole test suite: the build of scripts/setup.sh (reused as it is), every C++ test (golden
# matrix at every ISA level this CPU has, validation, kernels, golden files), the installed-package
# consumer, the Python package's tests (built into build/python; the torch ops and the examples in
# torch's own venv, scripts/torch-venv.sh), a mutation campaign over golden files' metadata, and the CI
# sanitizer part (file-reading tests under ASan + UBSan, then both fuzzers for a bounded time).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash scripts/packages.sh
# The Python environment first: the build compiles the Python module (mlakit._core) against it.
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -r tests/python/requirements.txt
# torch's own environment is fetched while the C++ builds (it waits on the network more than on
# the cores); the torch tests run in it at the end, or say why they cannot.
torch_venv=${MLAKIT_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/mlakit/torch-venv}
torch_log=$(mktemp)
bash scripts/torch-venv.sh "$torch_venv" >"$torch_log" 2>&1 &
torch_pid=$!
bash scripts/setup.sh -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$root/.venv/bin/python"

echo "== includes point down the rooms"
python3 scripts/check-layers.py

echo "== C++ tests"
ctest --test-dir build --output-on-failure -j"$(nproc)"

echo "== installed package: find_package(mlakit) from a separate project"
prefix=$(mktemp -d)
cmake --install build --prefix "$prefix" >/dev/null
cmake -S tests/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build/consumer >/dev/null
./build/consumer/consumer

echo "== Python: the mlakit package from the build tree, golden-file interop (numpy, ml_dtypes, safetensors)"
PYTHONPATH="$root/build/python" MLAKIT_BIN="$root/build/mlakit" .venv/bin/python -m pytest -q -rs tests/python

echo "== Python with torch: torch.ops.mlakit (golden files, opcheck, torch.compile), the examples"
if wait "$torch_pid"; then
  tail -1 "$torch_log"
  PYTHONPATH="$root/build/python" MLAKIT_BIN="$root/build/mlakit" "$torch_venv/bin/python" -m pytest -q -rs \
    tests/python/test_torch.py
  for example in examples/deepseek_v32_layer.py examples/minimax_msa_step.py; do
    PYTHONPATH="$root/build/python" "$torch_venv/bin/python" "$example" --small
  done
else
  echo "torch tests SKIPPED: $(tail -1 "$torch_log")"
fi

echo "== golden files with broken metadata: every mutant refused cleanly or run"
python3 fuzz/params_campaign.py --mlakit build/mlakit --per-op 2 --max-bytes 65536

echo "== sanitizers (CI part) and fuzzing of whole golden files (bounded)"
MLAKIT_FUZZ_SECONDS=${MLAKIT_FUZZ_SECONDS:-20} bash scripts/sanitize.sh --ci
echo "== all tests passed"
