#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, for a GPU host that may lack the build dependencies.
#
#   scripts/gpu-check.sh pack BUNDLE [PYTHON_BUILD | --python=X.Y ...]
#       On the build machine, after a build with the CUDA back-end (scripts/setup.sh; sm_90a by
#       default): writes BUNDLE (a .tar.xz) holding the test programs, the benchmarks, the mlakit
#       command and the shared libraries they need beyond the C/C++ runtime and CUDA's own, and
#       the Python package of build/ (with .venv's test-only packages) and of each PYTHON_BUILD
#       (another build tree configured with MLAKIT_BUILD_PYTHON=ON for another Python version,
#       such as the GPU host's), one folder per Python version. --python=X.Y makes that tree
#       (build-pyX.Y, the library and the module only) with pythonX.Y from PATH or pyenv; the
#       H200 hosts run Python 3.12.
#
#   scripts/gpu-check.sh run OUT [BUNDLE] [PHASE...]
#       On the GPU host, from the source root (data/golden and bench/ are read from there), with
#       the programs of BUNDLE or, without one, of build/. PHASE is any of
#         info       GPU, driver and CPU facts; `mlakit info`                       -> OUT/info.txt
#         tests      every test program (the golden matrix then includes cuda)      -> OUT/tests.log
#         sanitizer  compute-sanitizer memcheck on golden files of every operator   -> OUT/sanitizer.log
#         bench      operator benchmarks: cuda rows, the GPU bf16 matmul peak, cpu  -> OUT/bench_ops.json
#         scaling    ops 1 and 2 on the cpu back-end at 1, 2, 4, ... threads        -> OUT/scaling.json
#         kernels    the score kernels, one thread, at the top two ISA levels      -> OUT/kernels.json
#         torch      the same math in PyTorch on the GPU, and torch.matmul 8192^3   -> OUT/torch.json
#         torch-ops  tests/python/test_torch.py's CUDA cases (torch.ops.mlakit on CUDA tensors, on
#                    a side stream) with the bundle's package for the host's Python version (see
#                    pack's PYTHON_BUILD), the host's own test packages where the bundle has none
#                                                                               -> OUT/torch_ops.log
#         driver     fails (exit 3) unless the NVIDIA driver is R580 or newer: the CUDA 13
#                    runtime linked in needs it, and on an older one every cuda case would skip
#         gpu-tests  the cuda cases only (every golden-matrix *_cuda case, op 5's GPTQ cases again
#                    through the decode-once route, op 4's cases again through the ring kernel
#                    (the default from 64 heads) with its products on wgmma and on mma.sync, on
#                    its wide steps, with P in registers, and through the first kernel, ops 1, 3 and 5's cases again
#                    through the wgmma kernels (op 5's GPTQ decoded once), op 3's with its attention
#                    tiles prefetched, test_gpu's graph
#                    capture and device-flag tests), CUDA_LAUNCH_BLOCKING=1 so a fault names its
#                    kernel;
#                    a skipped case counts as a failure here                       -> OUT/gpu_tests.log
#         sanitizers compute-sanitizer memcheck, racecheck and synccheck on golden files
#                    of every operator                                             -> OUT/sanitizers.log
#         headline   the headline benchmark rows (one or two per operator) on cuda beside the
#                    PyTorch formulations of the same cases and torch's 8192^3 bf16 matmul,
#                    op 4's T=4096 row again through the first kernel (named .../cuda.first),
#                    the ring kernel on mma.sync (.../cuda.ring_mma), on its wide steps
#                    (.../cuda.wide) and with P in registers (.../cuda.p_regs, .wide_p_regs), op 3's with its attention tiles prefetched
#                    (.../cuda.prefetch), ops 1, 3 and 5's rows again
#                    through the wgmma kernels (op 1's scores, op 3's KV projection and
#                    attention; .../cuda.wgmma)
#                                                            -> OUT/bench_ops.json, OUT/torch.json
#         table      every cuda benchmark row (one bounded process per operator) and the PyTorch
#                    headline cases (--quick) on the GPU, and the joined table for RESULTS.md
#                                     -> OUT/bench_ops.json, OUT/torch.json, OUT/table_rows.txt
#         ncu        Nsight Compute (speed of light, launch statistics, occupancy) on the kernels
#                    of each headline row, the first calls (op 4's again on its wide steps, op 3's
#                    on its wgmma kernels, op 5's fp8 T 2048 on its wgmma GEMM)
#                                                                                   -> OUT/ncu.txt
#         amx        the amx level on the host's CPU: the tile kernels' and the tile routes' tests,
#                    the tile GEMM rows and ops 4 and 5 at the amx and avx512bf16 levels, and
#                    op 5 with packed weights, PyTorch's bf16 CPU formulations
#                                                               -> OUT/amx_tests.log, OUT/amx_*.json,
#                                                                  OUT/amx_torch.txt
#       (default: all of the first list, in that order; `first` is the short first call on a loaned
#       GPU host: driver info gpu-tests torch-ops sanitizers headline ncu, about 2-3 minutes on an
#       H200). Past seven files in OUT, all but summary.txt end in OUT/logs.tar.gz. OUT/summary.txt gets
#       one line per phase, the PyTorch table and, after bench and torch (or headline), the table of
#       bench/gpu_table.py (mlakit against PyTorch and the matmul rate, with the targets).
#       The exit status is non-zero when a phase failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Shared libraries a program needs beyond the C/C++ runtime and the CUDA driver and toolkit
# (those come from the GPU host, whose glibc and libstdc++ are at least as new).
bundled_libs() {
  ldd "$@" | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*)\.so'
}

pack() {
  local bundle=$1 stage
  shift
  [ -x build/tests/test_cuda_emulated ] && [ -x build/bench/mlakit_bench_ops ] && [ -x build/mlakit ] ||
    { echo "build/ lacks the tests or benchmarks: run scripts/setup.sh first" >&2; return 1; }
  [ -d build/CMakeFiles/mlakit_cuda.dir ] || { echo "build/ has no CUDA back-end (was nvcc found?)" >&2; return 1; }
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/lib"
  local programs=()
  for p in build/tests/test_* build/bench/mlakit_bench_* build/mlakit; do
    [ -f "$p" ] && [ -x "$p" ] && programs+=("$p")
  done
  cp "${programs[@]}" "$stage/bin/"
  bundled_libs "${programs[@]}" | while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  local parts=(bin lib) tree version trees=()
  for tree in "$@"; do
    case $tree in
      --python=*) trees+=("$(python_tree "${tree#--python=}")") || return 1 ;;
      *) trees+=("$tree") ;;
    esac
  done
  # The Python packages, one folder per Python version (python/3.11/mlakit, ...): build/'s as the
  # test suite builds it, with the test-only packages the torch tests import beside torch and
  # numpy (from .venv, for that version only), and those of the other build trees named.
  for tree in build "${trees[@]}"; do
    [ -f "$tree/python/mlakit/__init__.py" ] || continue
    version=$(find "$tree/python/mlakit" -maxdepth 1 -name '_core.cpython-*.so' | sed -E 's/.*cpython-([0-9])([0-9]+)-.*/\1.\2/' | head -1)
    [ -n "$version" ] || continue
    mkdir -p "$stage/python/$version"
    cp -r "$tree/python/mlakit" "$stage/python/$version/"
    if [ "$tree" = build ] && [ -x .venv/bin/python ]; then
      local site
      mkdir -p "$stage/python/$version/site"
      site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      for pkg in ml_dtypes safetensors _pytest pytest py.py pluggy iniconfig packaging; do
        [ -e "$site/$pkg" ] && cp -r "$site/$pkg" "$stage/python/$version/site/"
      done
    fi
    echo "python $version package from $tree/"
  done
  [ -d "$stage/python" ] && parts+=(python)
  mkdir -p "$(dirname "$bundle")"
  # Every program links the same device code (about 10 MB each): xz's 64 MiB dictionary (-9) finds
  # it again across them, half the bundle of the default 8 MiB (24 against 50 MB).
  if ! XZ_OPT="${XZ_OPT:--9 -T0}" tar -C "$stage" -cJf "$bundle" "${parts[@]}"; then
    rm -rf "$stage"
    echo "pack: writing $bundle failed" >&2
    return 1
  fi
  rm -rf "$stage"
  echo "packed ${#programs[@]} programs and $(bundled_libs "${programs[@]}" | wc -l) libraries into $bundle ($(du -h "$bundle" | cut -f1))"
}

# Builds build-pyX.Y (the library and the Python module for Python X.Y, with a venv holding
# nanobind) and prints its path; the interpreter comes from PATH or pyenv.
python_tree() {
  local version=$1 py tree candidate
  tree=build-py$version
  py=""
  # The first that runs: a pyenv shim on PATH fails where that version is not selected.
  for candidate in $(command -v "python$version") "$HOME"/.pyenv/versions/"$version".*/bin/"python$version"; do
    if [ -x "$candidate" ] && "$candidate" -c 'import venv' >/dev/null 2>&1; then
      py=$candidate
      break
    fi
  done
  [ -n "$py" ] || { echo "no python$version on PATH or in pyenv" >&2; return 1; }
  if [ ! -x "$tree/venv/bin/python" ]; then
    "$py" -m venv "$tree/venv" >&2 && "$tree/venv/bin/pip" install -q nanobind >&2 || return 1
  fi
  cmake -S . -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_BUILD_TESTS=OFF -DMLAKIT_BUILD_BENCH=OFF \
    -DMLAKIT_BUILD_TOOLS=OFF -DMLAKIT_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PWD/$tree/venv/bin/python" >&2 &&
    cmake --build "$tree" -j"$(nproc)" >&2 || return 1
  echo "$tree"
}

note() { echo "$*" | tee -a "$out/summary.txt"; }

phase_info() {
  {
    nvidia-smi || true
    nvcc --version 2>/dev/null | tail -2
    python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)' || true
    lscpu
    grep -m1 -o 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '
    echo
    "$bin/mlakit" info
  } >"$out/info.txt" 2>&1
  note "info: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); $(lscpu | sed -n 's/^Model name: *//p')"
}

phase_tests() {
  local pids=() names=() failed=0 logs
  logs=$(mktemp -d)
  for t in "$bin"/test_*; do
    [ -x "$t" ] || continue
    names+=("$(basename "$t")")
    "$t" --gtest_brief=1 >"$logs/$(basename "$t").log" 2>&1 &
    pids+=($!)
  done
  : >"$out/tests.log"
  for i in "${!pids[@]}"; do
    local rc=0
    wait "${pids[$i]}" || rc=$?
    [ $rc -eq 0 ] || failed=$((failed + 1))
    {
      echo "== ${names[$i]} (exit $rc)"
      cat "$logs/${names[$i]}.log"
    } >>"$out/tests.log"
    local log="$logs/${names[$i]}.log"
    note "tests: ${names[$i]}: exit $rc; $(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0) passed," \
      "$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0) skipped," \
      "$(grep -Eo '^\[  FAILED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0) failed"
  done
  rm -rf "$logs"
  note "tests: $failed of ${#pids[@]} programs failed"
}

status=0
fail() { note "FAIL: $*"; status=1; }

phase_driver() {
  local version major
  version=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  major=${version%%.*}
  if [ -z "$version" ] || [ "${major:-0}" -lt 580 ] 2>/dev/null; then
    note "driver: '${version:-none}': the CUDA 13 runtime needs R580 or newer; stopping"
    exit 3
  fi
  note "driver: $version ($(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1))"
}

# The golden-matrix cases on cuda and the GPU-only tests, every program at once (the GPU is shared
# by the processes; the CPU work of each case, its reference, runs beside).
phase_gpu_tests() {
  local pids=() names=() logs failed=0
  logs=$(mktemp -d)
  : >"$out/gpu_tests.log"
  for t in "$bin"/test_*; do
    [ -x "$t" ] || continue
    local name filter
    name=$(basename "$t")
    case $name in
      test_gpu) filter='*' ;;
      test_cuda_emulated | test_kernels | test_core) continue ;;  # CPU-only
      test_whole) filter='*cuda*:*Cuda*:-*WithoutAGpu*' ;;  # that one is for hosts without a GPU
      *) filter='*cuda*:*Cuda*' ;;
    esac
    names+=("$name")
    CUDA_LAUNCH_BLOCKING=1 MLAKIT_REQUIRE_GPU=1 timeout "${MLAKIT_GPU_TEST_SECONDS:-120}" "$t" \
      --gtest_filter="$filter" --gtest_brief=1 >"$logs/$name.log" 2>&1 &
    pids+=($!)
  done
  # A program's cases once more with route switches forced (SWITCH alone: on; SWITCH=VALUE):
  # NAME "SWITCH..." PROGRAM FILTER.
  route_pass() {
    [ -x "$bin/$3" ] || return 0
    local switches=() v
    for v in $2; do case $v in *=*) switches+=("$v") ;; *) switches+=("$v=on") ;; esac; done
    names+=("$1")
    env "${switches[@]}" CUDA_LAUNCH_BLOCKING=1 MLAKIT_REQUIRE_GPU=1 timeout "${MLAKIT_GPU_TEST_SECONDS:-120}" "$bin/$3" \
      --gtest_filter="$4" --gtest_brief=1 >"$logs/$1.log" 2>&1 &
    pids+=($!)
  }
  # Op 5's GPTQ cases through the decode-once route (taken by the golden cases' few rows only when
  # forced); op 4's cases, its graph capture and device flag through the ring kernel (taken in the
  # automatic mode from 64 heads, which few golden cases have), with its products on wgmma (its
  # default), on mma.sync, on its wide steps and with P in registers (forced only), and through the
  # first kernel; ops 1,
  # 3 and 5's cases through the wgmma
  # kernels (off in the automatic mode: slower there or not measured), op 5's GPTQ cases decoded
  # once so that they reach one.
  route_pass test_fused_qkv_paged.gptq_decode_once MLAKIT_CUDA_GPTQ_DECODE_ONCE test_fused_qkv_paged '*gptq*cuda*'
  route_pass test_fused_qkv_paged.wgmma "MLAKIT_CUDA_WGMMA MLAKIT_CUDA_GPTQ_DECODE_ONCE" test_fused_qkv_paged \
    '*cuda*:*Cuda*'
  route_pass test_mla_prefill_fp8.wgmma MLAKIT_CUDA_WGMMA test_mla_prefill_fp8 '*cuda*:*Cuda*'
  route_pass test_lightning_indexer.wgmma MLAKIT_CUDA_WGMMA test_lightning_indexer '*cuda*:*Cuda*'
  route_pass test_mla_prefill_fp8.prefetch MLAKIT_CUDA_MLA_PREFETCH test_mla_prefill_fp8 '*cuda*:*Cuda*'
  route_pass test_sparse_mla_prefill.ring_mma "MLAKIT_CUDA_SPARSE_MLA_RING MLAKIT_CUDA_WGMMA=off" \
    test_sparse_mla_prefill '*cuda*:*Cuda*'
  route_pass test_sparse_mla_prefill.first MLAKIT_CUDA_SPARSE_MLA_RING=off test_sparse_mla_prefill '*cuda*:*Cuda*'
  route_pass test_gpu.first MLAKIT_CUDA_SPARSE_MLA_RING=off test_gpu '*sparse_mla_prefill*:CudaDeviceErrors.TopkLengths*'
  route_pass test_gpu.wgmma MLAKIT_CUDA_WGMMA test_gpu '*fused_qkv_paged*:*FusedQkv*:*mla_prefill_fp8*:*lightning_indexer*'
  route_pass test_sparse_mla_prefill.ring MLAKIT_CUDA_SPARSE_MLA_RING test_sparse_mla_prefill '*cuda*:*Cuda*'
  route_pass test_gpu.ring MLAKIT_CUDA_SPARSE_MLA_RING test_gpu '*sparse_mla_prefill*:CudaDeviceErrors.TopkLengths*'
  route_pass test_sparse_mla_prefill.ring_wide "MLAKIT_CUDA_SPARSE_MLA_RING MLAKIT_CUDA_SPARSE_MLA_WIDE" \
    test_sparse_mla_prefill '*cuda*:*Cuda*'
  route_pass test_gpu.ring_wide "MLAKIT_CUDA_SPARSE_MLA_RING MLAKIT_CUDA_SPARSE_MLA_WIDE" test_gpu \
    '*sparse_mla_prefill*:CudaDeviceErrors.TopkLengths*'
  route_pass test_sparse_mla_prefill.p_regs "MLAKIT_CUDA_SPARSE_MLA_RING MLAKIT_CUDA_SPARSE_MLA_P_REGS" \
    test_sparse_mla_prefill '*cuda*:*Cuda*'
  route_pass test_sparse_mla_prefill.wide_p_regs \
    "MLAKIT_CUDA_SPARSE_MLA_RING MLAKIT_CUDA_SPARSE_MLA_WIDE MLAKIT_CUDA_SPARSE_MLA_P_REGS" test_sparse_mla_prefill \
    '*cuda*:*Cuda*'
  route_pass test_gpu.p_regs "MLAKIT_CUDA_SPARSE_MLA_RING MLAKIT_CUDA_SPARSE_MLA_P_REGS" test_gpu \
    '*sparse_mla_prefill*:CudaDeviceErrors.TopkLengths*'
  for i in "${!pids[@]}"; do
    local rc=0 log="$logs/${names[$i]}.log" passed skipped failures
    wait "${pids[$i]}" || rc=$?
    passed=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
    skipped=$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
    failures=$(grep -Eo '^\[  FAILED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' || echo 0)
    { echo "== ${names[$i]} (exit $rc)"; cat "$log"; } >>"$out/gpu_tests.log"
    note "gpu-tests: ${names[$i]}: exit $rc; $passed passed, $skipped skipped, $failures failed"
    if [ "$rc" -ne 0 ] || [ "$skipped" -ne 0 ] || [ "$passed" -eq 0 ]; then failed=$((failed + 1)); fi
  done
  rm -rf "$logs"
  [ $failed -eq 0 ] || fail "gpu-tests: $failed of ${#pids[@]} programs failed, skipped or ran nothing"
}

# memcheck on the files below, racecheck and synccheck on one file per operator; the three tools
# run side by side.
phase_sanitizers() {
  local sanitizer
  sanitizer=$(command -v compute-sanitizer ||
    find /usr/local/cuda* /opt -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -1)
  [ -n "$sanitizer" ] || { fail "sanitizers: compute-sanitizer not found"; return; }
  local per_op=(lightning_indexer.default msa_block_indexer.prefill_ragged_random mla_prefill_fp8.deepseek_dims
                sparse_mla_prefill.deepseek_bf16 sparse_mla_prefill.deepseek_bf16@ring
                fused_qkv_paged.fp8_bf16_partial_blocks fused_qkv_paged.dense_bf16_prefill@wgmma
                fused_qkv_paged.fp8_bf16_partial_blocks@wgmma
                mla_prefill_fp8.deepseek_dims@wgmma sparse_mla_prefill.deepseek_bf16@ring_mma
                sparse_mla_prefill.deepseek_bf16@first sparse_mla_prefill.deepseek_bf16@ring_wide
                mla_prefill_fp8.deepseek_dims@prefetch lightning_indexer.default@wgmma
                sparse_mla_prefill.deepseek_bf16@p_regs sparse_mla_prefill.deepseek_bf16@wide_p_regs)
  run_tool() {
    local tool=$1 failed=0
    shift
    for entry in "$@"; do
      local rc=0 name=${entry%@*} once ring wgmma wide prefetch p_regs
      route_env "$entry"
      echo "== $tool $entry" >>"$out/sanitizer.$tool.log"
      MLAKIT_CUDA_GPTQ_DECODE_ONCE=$once MLAKIT_CUDA_SPARSE_MLA_RING=$ring MLAKIT_CUDA_SPARSE_MLA_WIDE=$wide \
        MLAKIT_CUDA_SPARSE_MLA_P_REGS=$p_regs \
        MLAKIT_CUDA_MLA_PREFETCH=$prefetch MLAKIT_CUDA_WGMMA=$wgmma timeout 40 "$sanitizer" --tool "$tool" \
        --error-exitcode 99 "$bin/mlakit" check \
        "$root/data/golden/$name.s1.safetensors" --backend cuda >>"$out/sanitizer.$tool.log" 2>&1 || rc=$?
      echo "exit $rc" >>"$out/sanitizer.$tool.log"
      [ $rc -eq 0 ] || failed=$((failed + 1))
    done
    echo "$tool: $# files, $failed failed" >"$out/sanitizer.$tool.result"
  }
  run_tool memcheck "${sanitizer_files[@]}" &
  run_tool racecheck "${per_op[@]}" &
  run_tool synccheck "${per_op[@]}" &
  wait
  cat "$out"/sanitizer.{memcheck,racecheck,synccheck}.log >"$out/sanitizers.log" 2>/dev/null
  for tool in memcheck racecheck synccheck; do
    local r
    r=$(cat "$out/sanitizer.$tool.result" 2>/dev/null || echo "$tool: no result")
    note "sanitizers: $r"
    case $r in *", 0 failed") ;; *) fail "sanitizers: $tool" ;; esac
    rm -f "$out/sanitizer.$tool.log" "$out/sanitizer.$tool.result"
  done
}

# NAME@decode_once: op 5's GPTQ file through the decode-once route; NAME@ring: op 4's file through
# the ring kernel (its products on wgmma); NAME@ring_mma: the same on mma.sync; NAME@ring_wide:
# the ring kernel on its wide steps; NAME@p_regs, NAME@wide_p_regs: the ring kernel with P in
# registers, on 32-slot or wide steps; NAME@first: op 4's file through the first kernel; NAME@wgmma:
# an op 1, 3 or 5 file through the wgmma kernels; NAME@prefetch: an op 3 file with its attention tiles
# prefetched. Sets `once`, `ring`, `wide`, `wgmma`, `prefetch` and `p_regs` (the route switches'
# values) for the entry.
route_env() {
  once=auto ring=auto wgmma=auto wide=auto prefetch=auto p_regs=auto
  case $1 in
    *@p_regs) ring=on p_regs=on ;;
    *@wide_p_regs) ring=on wide=on p_regs=on ;;
    *@prefetch) prefetch=on ;;
    *@decode_once) once=on ;;
    *@ring) ring=on ;;
    *@ring_wide) ring=on wide=on ;;
    *@ring_mma) ring=on wgmma=off ;;
    *@first) ring=off ;;
    *@wgmma) wgmma=on ;;
  esac
}

headline_rows=(lightning_indexer/prefill_b1_s4096_c8192_h64 msa_block_indexer/prefill_s4096_c28672_h8
               mla_prefill_fp8/h128_b1_s4096_c0 sparse_mla_prefill/dsv32_t4096
               fused_qkv_paged/deepseek_v3_mla_fp8_t2048 fused_qkv_paged/llama3_8b_gptq_t512)
headline_bench="^($(IFS='|'; echo "${headline_rows[*]}"))/cuda\$"
headline_torch=(--case prefill_b1_s4096_c8192_h64 --case prefill_s4096_c28672_h8 --case h128_b1_s4096_c0
                --case dsv32_t4096 --case deepseek_v3_mla_fp8_t2048 --case llama3_8b_gptq_t512)

# The cuda rows matching FILTER through a route forced (SWITCH alone: on; SWITCH=VALUE), appended to
# OUT/bench_ops.json as .../cuda.SUFFIX rows (a second process: a route switch is read once per
# process): route_rows "SWITCH..." SUFFIX FILTER SECONDS.
route_rows() {
  local suffix=$2 filter=$3 seconds=$4 rc=0 switches=() v
  for v in $1; do case $v in *=*) switches+=("$v") ;; *) switches+=("$v=on") ;; esac; done
  env "${switches[@]}" MLAKIT_BENCH_CPU_PEAK=off MLAKIT_NUM_THREADS=$(nproc) timeout "$seconds" \
    "$bin/mlakit_bench_ops" --benchmark_filter="$filter" --benchmark_min_time=0.1 --benchmark_format=json \
    --benchmark_out="$out/bench_route.json" --benchmark_out_format=json >>"$out/bench_ops.txt" 2>&1 || rc=$?
  python3 - "$out/bench_ops.json" "$out/bench_route.json" "$suffix" <<'PY'
import json, sys
try:
    with open(sys.argv[1]) as f:
        merged = json.load(f)
except (OSError, ValueError):
    merged = {"benchmarks": []}
try:
    with open(sys.argv[2]) as f:
        routed = json.load(f).get("benchmarks", [])
except (OSError, ValueError):
    routed = []
for b in routed:
    if b["name"].endswith("/cuda"):
        b["name"] += "." + sys.argv[3]
        merged["benchmarks"].append(b)
with open(sys.argv[1], "w") as f:
    json.dump(merged, f, indent=1)
PY
  rm -f "$out/bench_route.json"
  note "$suffix rows: exit $rc, $(grep -c "cuda\.$suffix" "$out/bench_ops.json" 2>/dev/null) rows"
}

phase_headline() {
  local rc=0
  MLAKIT_NUM_THREADS=$(nproc) timeout 120 "$bin/mlakit_bench_ops" --benchmark_filter="$headline_bench" \
    --benchmark_min_time=0.3 --benchmark_format=json --benchmark_out="$out/bench_ops.json" \
    --benchmark_out_format=json >"$out/bench_ops.txt" 2>&1 || rc=$?
  note "headline bench: exit $rc, $(grep -c '"name"' "$out/bench_ops.json" 2>/dev/null) rows"
  [ $rc -eq 0 ] || fail "headline bench"
  route_rows MLAKIT_CUDA_SPARSE_MLA_RING=off first '^sparse_mla_prefill/dsv32_t4096/cuda$' 45
  route_rows MLAKIT_CUDA_WGMMA=off ring_mma '^sparse_mla_prefill/dsv32_t4096/cuda$' 45
  route_rows MLAKIT_CUDA_SPARSE_MLA_WIDE wide '^sparse_mla_prefill/dsv32_t4096/cuda$' 45
  route_rows MLAKIT_CUDA_SPARSE_MLA_P_REGS p_regs '^sparse_mla_prefill/dsv32_t4096/cuda$' 45
  route_rows "MLAKIT_CUDA_SPARSE_MLA_WIDE MLAKIT_CUDA_SPARSE_MLA_P_REGS" wide_p_regs '^sparse_mla_prefill/dsv32_t4096/cuda$' 45
  route_rows MLAKIT_CUDA_MLA_PREFETCH prefetch '^mla_prefill_fp8/h128_b1_s4096_c0/cuda$' 45
  route_rows MLAKIT_CUDA_WGMMA wgmma \
    '^(fused_qkv_paged/(deepseek_v3_mla_fp8_t2048|llama3_8b_dense_t2048)|mla_prefill_fp8/h128_b1_s4096_c0|lightning_indexer/prefill_b1_s4096_c8192_h64)/cuda$' 75
  route_rows MLAKIT_CUDA_GPTQ_DECODE_ONCE=off in_loop '^fused_qkv_paged/llama3_8b_gptq_t512/cuda$' 45
  rc=0
  PYTHONUNBUFFERED=1 timeout 120 python3 bench/torch_baseline.py --device cuda --op all "${headline_torch[@]}" \
    --json "$out/torch.json" >>"$out/summary.txt" 2>&1 || rc=$?
  note "headline torch: exit $rc"
  if [ -f "$out/bench_ops.json" ] && [ -f "$out/torch.json" ]; then
    python3 bench/gpu_table.py "$out/bench_ops.json" "$out/torch.json" >>"$out/summary.txt" 2>&1
  fi
}

# Nsight Compute on each operator's headline row (op 4 on its default route): the first two calls'
# kernels, one process per operator, each bounded. The clocks are left as found.
phase_ncu() {
  local ncu entry row op rc
  ncu=$(command -v ncu || find /usr/local/cuda* /opt -name ncu -type f -perm -u+x 2>/dev/null | head -1)
  [ -n "$ncu" ] || { fail "ncu: not found"; return; }
  # ROW@wide: op 4's row on the ring kernel's wide steps; ROW@wgmma: op 3's and op 5's on the
  # warpgroup kernels (op 3's KV projection on the pipelined GEMM and its attention, each kernel's
  # time apart).
  for entry in "${headline_rows[@]}" sparse_mla_prefill/dsv32_t4096@wide mla_prefill_fp8/h128_b1_s4096_c0@wgmma \
      fused_qkv_paged/deepseek_v3_mla_fp8_t2048@wgmma; do
    row=${entry%@*} op=${entry//\//.}
    rc=0
    MLAKIT_CUDA_SPARSE_MLA_WIDE=$([ "$entry" = "$row@wide" ] && echo on || echo auto) \
      MLAKIT_CUDA_MLA_PREFETCH=$([ "$entry" = "$row@prefetch" ] && echo on || echo auto) \
      MLAKIT_CUDA_WGMMA=$([ "$entry" = "$row@wgmma" ] && echo on || echo auto) MLAKIT_BENCH_CPU_PEAK=off \
      timeout "${MLAKIT_NCU_SECONDS:-60}" "$ncu" --clock-control none --kernel-name-base demangled \
      -k regex:mlakit::cuda --launch-count 8 --section SpeedOfLight --section LaunchStats --section Occupancy \
      "$bin/mlakit_bench_ops" --benchmark_filter="^$row/cuda\$" --benchmark_min_time=0.01 >"$out/ncu.$op.txt" 2>&1 || rc=$?
    note "ncu $entry: exit $rc, $(grep -c 'Section: GPU Speed Of Light' "$out/ncu.$op.txt") kernels profiled"
    [ $rc -eq 0 ] || fail "ncu $entry"
    { echo "== $entry (exit $rc)"; cat "$out/ncu.$op.txt"; } >>"$out/ncu.txt"
    rm -f "$out/ncu.$op.txt"
  done
}

# Every cuda benchmark row and every PyTorch case on the GPU, then the joined table (the RESULTS run).
phase_table() {
  local rc=0 files=()
  # One process per operator, each bounded, so that one slow operator leaves the others' rows. Each
  # process measures the GPU's matmul peak first (the CPU's probe is left out: cuda rows only).
  # Its console output is kept as it goes: a process stopped at its bound leaves the rows it ran.
  for op in lightning_indexer msa_block_indexer mla_prefill_fp8 sparse_mla_prefill fused_qkv_paged; do
    rc=0
    MLAKIT_BENCH_CPU_PEAK=off MLAKIT_NUM_THREADS=$(nproc) timeout "${MLAKIT_TABLE_OP_SECONDS:-150}" "$bin/mlakit_bench_ops" \
      --benchmark_filter="^$op/.*/cuda\$" --benchmark_min_time=0.05 --benchmark_format=json \
      >"$out/bench.$op.json" 2>>"$out/table_rows.txt" || rc=$?
    note "table bench $op: exit $rc"
    files+=("$out/bench.$op.json")
  done
  # A process stopped at its bound leaves its JSON cut off after some row: the rows it finished
  # are kept (the document is closed after the last complete one).
  python3 - "$out/bench_ops.json" "${files[@]}" <<'PY'
import json, sys
merged = None
for path in sys.argv[2:]:
    with open(path) as f:
        text = f.read()
    start = text.find("{")
    if start < 0:
        continue
    try:
        run = json.loads(text[start:])
    except ValueError:
        end = text.rfind("\n    },")
        if end < 0:
            continue
        run = json.loads(text[start:end] + "\n    }\n  ]\n}")
    if merged is None:
        merged = run
    else:
        merged["benchmarks"] += run.get("benchmarks", [])
with open(sys.argv[1], "w") as f:
    json.dump(merged or {"benchmarks": []}, f, indent=1)
PY
  cat "${files[@]}" >>"$out/table_rows.txt"
  rm -f "$out"/bench.*.json
  note "table bench: $(grep -c '"name"' "$out/bench_ops.json" 2>/dev/null) rows"
  route_rows MLAKIT_CUDA_SPARSE_MLA_RING=off first '^sparse_mla_prefill/.*/cuda$' "${MLAKIT_TABLE_OP_SECONDS:-150}"
  route_rows MLAKIT_CUDA_WGMMA=off ring_mma '^sparse_mla_prefill/.*/cuda$' "${MLAKIT_TABLE_OP_SECONDS:-150}"
  route_rows MLAKIT_CUDA_SPARSE_MLA_WIDE wide '^sparse_mla_prefill/.*/cuda$' "${MLAKIT_TABLE_OP_SECONDS:-150}"
  route_rows MLAKIT_CUDA_MLA_PREFETCH prefetch '^mla_prefill_fp8/.*/cuda$' "${MLAKIT_TABLE_OP_SECONDS:-150}"
  route_rows MLAKIT_CUDA_WGMMA wgmma '^(fused_qkv_paged|mla_prefill_fp8|lightning_indexer)/.*/cuda$' "${MLAKIT_TABLE_OP_SECONDS:-150}"
  rc=0
  PYTHONUNBUFFERED=1 timeout "${MLAKIT_TABLE_TORCH_SECONDS:-120}" python3 bench/torch_baseline.py --device cuda \
    --op all --quick --reps 5 --json "$out/torch.json" >>"$out/summary.txt" 2>&1 || rc=$?
  note "table torch: exit $rc"
  [ $rc -eq 0 ] || fail "table torch"
  if [ -f "$out/bench_ops.json" ] && [ -f "$out/torch.json" ]; then
    python3 bench/gpu_table.py "$out/bench_ops.json" "$out/torch.json" >>"$out/summary.txt" 2>&1
  fi
}

# One golden file per operator and per main path (weight formats, cache dtypes, prefill/decode).
sanitizer_files=(
  lightning_indexer.default lightning_indexer.decode lightning_indexer.page_size_3
  msa_block_indexer.prefill_ragged_random msa_block_indexer.decode_fp8_random
  mla_prefill_fp8.deepseek_dims mla_prefill_fp8.chunked
  sparse_mla_prefill.deepseek_bf16 sparse_mla_prefill.deepseek_fp8 sparse_mla_prefill.general_bf16
  fused_qkv_paged.dense_bf16_prefill fused_qkv_paged.fp8_bf16_partial_blocks fused_qkv_paged.gptq_f32_g128_zp_gidx
  fused_qkv_paged.gptq_bf16_g32_gidx@decode_once fused_qkv_paged.dense_bf16_prefill@wgmma
  mla_prefill_fp8.deepseek_dims@wgmma sparse_mla_prefill.general_bf16@ring_mma
  sparse_mla_prefill.flashmla_v32@ring_mma sparse_mla_prefill.deepseek_fp8@ring_mma
  sparse_mla_prefill.general_bf16@ring sparse_mla_prefill.deepseek_fp8@first
  sparse_mla_prefill.flashmla_v32@ring sparse_mla_prefill.general_bf16@ring_wide mla_prefill_fp8.chunked@prefetch
  lightning_indexer.default@wgmma sparse_mla_prefill.deepseek_fp8@p_regs
)

phase_sanitizer() {
  local failed=0 sanitizer
  sanitizer=$(command -v compute-sanitizer ||
    find /usr/local/cuda* /opt -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -1)
  if [ -z "$sanitizer" ]; then
    note "sanitizer: compute-sanitizer not found"
    return
  fi
  : >"$out/sanitizer.log"
  for entry in "${sanitizer_files[@]}"; do
    local name=${entry%@*} once ring wgmma wide prefetch p_regs rc=0
    route_env "$entry"
    local f="$root/data/golden/$name.s1.safetensors"
    echo "== $entry" >>"$out/sanitizer.log"
    MLAKIT_CUDA_GPTQ_DECODE_ONCE=$once MLAKIT_CUDA_SPARSE_MLA_RING=$ring MLAKIT_CUDA_SPARSE_MLA_WIDE=$wide \
      MLAKIT_CUDA_SPARSE_MLA_P_REGS=$p_regs \
      MLAKIT_CUDA_MLA_PREFETCH=$prefetch MLAKIT_CUDA_WGMMA=$wgmma "$sanitizer" --tool memcheck --error-exitcode 99 \
      "$bin/mlakit" check "$f" --backend cuda \
      >>"$out/sanitizer.log" 2>&1 || rc=$?
    [ $rc -eq 0 ] || failed=$((failed + 1))
    echo "exit $rc" >>"$out/sanitizer.log"
  done
  note "sanitizer: memcheck on ${#sanitizer_files[@]} golden files, $failed failed"
}

phase_bench() {
  MLAKIT_NUM_THREADS=$(nproc) "$bin/mlakit_bench_ops" \
    --benchmark_filter="${MLAKIT_GPU_BENCH_FILTER:-/cuda\$}" --benchmark_min_time=0.2 \
    --benchmark_format=json --benchmark_out="$out/bench_ops.json" --benchmark_out_format=json >/dev/null 2>&1
  note "bench: exit $?, $(grep -c '"name"' "$out/bench_ops.json" 2>/dev/null) rows"
}

phase_scaling() {
  local threads=1 files=()
  local filter="${MLAKIT_SCALING_FILTER:-^(lightning_indexer/(prefill_b1_s4096_c8192_h64|decode_b32_c32768_h64)|msa_block_indexer/(prefill_s4096_c28672_h8|decode_b32_c131072_h8_fp8))/cpu/}"
  local level
  level=$("$bin/mlakit" info 2>/dev/null | sed -n 's/^isa in use *: *//p')
  while [ "$threads" -le "$(nproc)" ]; do
    MLAKIT_NUM_THREADS=$threads "$bin/mlakit_bench_ops" --benchmark_filter="$filter${level:-}\$" \
      --benchmark_format=json --benchmark_out="$out/scaling.$threads.json" --benchmark_out_format=json >/dev/null 2>&1
    files+=("$out/scaling.$threads.json")
    threads=$((threads * 2))
  done
  python3 - "$out/scaling.json" "${files[@]}" <<'PY'
import json, sys
merged = {"runs": []}
for path in sys.argv[2:]:
    with open(path) as f:
        run = json.load(f)
    merged["runs"].append({"context": run.get("context", {}), "benchmarks": run.get("benchmarks", [])})
with open(sys.argv[1], "w") as f:
    json.dump(merged, f, indent=1)
PY
  rm -f "${files[@]}"
  note "scaling: ${#files[@]} thread counts"
}

# The host CPU's own kernels (amx where it has AMX, beside avx512bf16), single-threaded.
phase_kernels() {
  "$bin/mlakit_bench_kernels" --benchmark_filter="${MLAKIT_KERNELS_FILTER:-^(peak|index_score|block_score)/.*/(amx|avx512bf16)\$}" \
    --benchmark_min_time=0.2 --benchmark_format=json --benchmark_out="$out/kernels.json" \
    --benchmark_out_format=json >/dev/null 2>&1
  note "kernels: exit $?, $(grep -c '"name"' "$out/kernels.json" 2>/dev/null) rows"
}

# The formulations are first checked against the golden files with this host's torch.
phase_torch() {
  local rc=0
  note "torch check: $(python3 bench/torch_baseline.py --check 2>&1 | tail -1)"
  PYTHONUNBUFFERED=1 python3 bench/torch_baseline.py --device cuda --op all --json "$out/torch.json" \
    >>"$out/summary.txt" 2>&1 || rc=$?
  note "torch: exit $rc"
  if [ -f "$out/bench_ops.json" ] && [ -f "$out/torch.json" ]; then
    python3 bench/gpu_table.py "$out/bench_ops.json" "$out/torch.json" >>"$out/summary.txt" 2>&1
  fi
}

phase_torch_ops() {
  local have py_dir rc=0
  have=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  py_dir=${unpacked:-}/python/$have
  if [ -z "${unpacked:-}" ] || [ ! -d "$py_dir/mlakit" ]; then
    note "torch-ops: skipped (the bundle has no Python package for this host's Python $have:" \
      "$(ls "${unpacked:-/nonexistent}/python" 2>/dev/null | tr '\n' ' '))"
    return
  fi
  # The host's own test-only packages where the bundle carries none for its version.
  PYTHONPATH="$py_dir:$py_dir/site" MLAKIT_BIN="$bin/mlakit" python3 -m pytest -q -rs tests/python/test_torch.py \
    -k cuda >"$out/torch_ops.log" 2>&1 || rc=$?
  note "torch-ops: $(tail -1 "$out/torch_ops.log") (exit $rc)"
  [ "$rc" -eq 0 ] || fail "torch-ops"
  # On a GPU host a skipped CUDA case is a failure, as in gpu-tests.
  ! grep -q "skipped" "$out/torch_ops.log" || fail "torch-ops: CUDA cases skipped"
}

# The amx level on the host's CPU (where it has AMX): the tile kernels' and the operators' amx
# tests (real tiles against the emulation, the tile routes against the reference), then the tile
# GEMM rows (one thread, against the tile peak) and ops 4 and 5 at the amx and avx512bf16 levels in
# one process (two threads, and the amx rows again on every core), op 3's beside them (its f32
# paths on Intel CPUs), and PyTorch's bf16 CPU formulations of ops 4 and 5.
# MLAKIT_AMX_LEVELS narrows the operator rows' levels (default "amx|avx512bf16"); MLAKIT_AMX_TORCH=off
# leaves PyTorch out.
amx_ops_rows='^(fused_qkv_paged/(llama3_8b_dense_t512|llama3_8b_dense_t2048|llama3_8b_gptq_t512|deepseek_v3_mla_fp8_t512|deepseek_v3_mla_fp8_t2048)|sparse_mla_prefill/(dsv32_t256|dsv32_fp8_t1024|quick_h64_k512)|mla_prefill_fp8/(h16_b1_s1024_c4096|h128_b1_s1024_c0))/cpu/'
phase_amx() {
  if ! grep -q amx_tile /proc/cpuinfo; then
    note "amx: this CPU has no AMX tiles; skipped"
    return
  fi
  local rc=0
  : >"$out/amx_tests.log"
  for t in test_kernels:'*GemmTiles*:*AmxTiles*:KernelDispatch*' test_fused_qkv_paged:'*amx*' \
    test_sparse_mla_prefill:'*amx*' test_mla_prefill_fp8:'*amx*'; do
    rc=0
    MLAKIT_NUM_THREADS=$(nproc) timeout 150 "$bin/${t%%:*}" --gtest_filter="${t#*:}" --gtest_brief=1 \
      >>"$out/amx_tests.log" 2>&1 || rc=$?
    note "amx tests ${t%%:*}: exit $rc; $(grep -Eo '^\[  PASSED  \] [0-9]+' "$out/amx_tests.log" | tail -1 | grep -Eo '[0-9]+$') passed"
    [ $rc -eq 0 ] || fail "amx tests ${t%%:*}"
  done
  rc=0
  timeout 60 "$bin/mlakit_bench_kernels" --benchmark_filter='^(peak/.*|gemm/(tiles_.*|bf16_f8_block_scaled_m64.*|bf16_bf16_m128n64k576|bf16_nn_m128n512k64))/(amx|avx512bf16)$' \
    --benchmark_min_time=0.2 --benchmark_format=json --benchmark_out="$out/amx_kernels.json" \
    --benchmark_out_format=json >/dev/null 2>&1 || rc=$?
  note "amx kernels: exit $rc, $(grep -c '"name"' "$out/amx_kernels.json" 2>/dev/null) rows"
  rc=0
  MLAKIT_NUM_THREADS=2 timeout "${MLAKIT_AMX_OPS_SECONDS:-150}" "$bin/mlakit_bench_ops" \
    --benchmark_filter="$amx_ops_rows(${MLAKIT_AMX_LEVELS:-amx|avx512bf16})\$" \
    --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
    --benchmark_format=json >"$out/amx_ops.json" 2>/dev/null || rc=$?
  note "amx ops, 2 threads: exit $rc"
  rc=0
  MLAKIT_BENCH_CPU_PEAK=off MLAKIT_NUM_THREADS=$(nproc) timeout 60 "$bin/mlakit_bench_ops" \
    --benchmark_filter="${amx_ops_rows}amx\$" --benchmark_min_time=0.2 \
    --benchmark_format=json >"$out/amx_ops_all.json" 2>/dev/null || rc=$?
  note "amx ops, $(nproc) threads: exit $rc"
  rc=0
  MLAKIT_BENCH_CPU_PEAK=off MLAKIT_NUM_THREADS=2 timeout 90 "$bin/mlakit_bench_ops" \
    --benchmark_filter='^packed_weights/fused_qkv_paged/(llama3_8b_dense_t128|llama3_8b_dense_t512|llama3_8b_gptq_t512|deepseek_v3_mla_fp8_t512)$' \
    --benchmark_min_time=0.2 --benchmark_format=json >"$out/amx_packed.json" 2>/dev/null || rc=$?
  note "amx packed weights, 2 threads: exit $rc"
  [ "${MLAKIT_AMX_TORCH:-on}" != off ] || return 0
  rc=0
  PYTHONUNBUFFERED=1 timeout 90 python3 bench/torch_baseline.py --device cpu --op 5 --compute bf16 --threads 2 \
    --reps 3 --case llama3_8b_dense_t512 --case deepseek_v3_mla_fp8_t512 --case llama3_8b_gptq_t512 \
    >>"$out/amx_torch.txt" 2>&1 || rc=$?
  PYTHONUNBUFFERED=1 timeout 60 python3 bench/torch_baseline.py --device cpu --op 4 --compute bf16 --threads 2 \
    --reps 3 --case dsv32_t256 --case quick_h64_k512 >>"$out/amx_torch.txt" 2>&1 || rc=$?
  note "amx torch: exit $rc"
}

run() {
  out=$1
  shift
  mkdir -p "$out"
  bin="$root/build"
  unpacked=""
  if [ $# -gt 0 ] && [ -f "$1" ]; then
    unpacked=$(mktemp -d)
    tar -C "$unpacked" -xJf "$1"
    bin="$unpacked/bin"
    export LD_LIBRARY_PATH="$unpacked/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    # cuBLAS (the benchmarks' GPU peak probe) may come with a Python wheel rather than the toolkit.
    if ldd "$bin/mlakit_bench_ops" | grep -q 'libcublas.*not found'; then
      local cublas
      cublas=$(find / -xdev -name 'libcublas.so.13*' -path '*cublas*' 2>/dev/null | head -1)
      [ -n "$cublas" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$cublas")"
    fi
    shift
  else
    # In a build tree the programs sit in tests/ and bench/.
    local links
    links=$(mktemp -d)
    ln -s "$root"/build/tests/test_* "$root"/build/bench/mlakit_bench_* "$root/build/mlakit" "$links/"
    bin=$links
  fi
  export MLAKIT_SOURCE_DIR="$root"
  local phases=("$@")
  [ ${#phases[@]} -gt 0 ] || phases=(info tests sanitizer bench scaling kernels torch)
  [ "${phases[*]}" != first ] || phases=(driver info gpu-tests torch-ops sanitizers headline ncu)
  for p in "${phases[@]}"; do
    case $p in
      info | tests | sanitizer | bench | scaling | kernels | torch | driver | sanitizers | headline | table | amx | ncu) "phase_$p" ;;
      gpu-tests) phase_gpu_tests ;;
      torch-ops) phase_torch_ops ;;
      *) echo "unknown phase: $p" >&2; return 2 ;;
    esac
  done
  # A lent GPU host sends back few files: past seven, all but the summary go into one archive.
  if [ "$(find "$out" -maxdepth 1 -type f | wc -l)" -gt 7 ]; then
    (cd "$out" && find . -maxdepth 1 -type f ! -name summary.txt ! -name logs.tar.gz -printf '%P\n' | tar -czf logs.tar.gz -T - --remove-files)
    note "logs: every file but this summary in OUT/logs.tar.gz"
  fi
  return $status
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
