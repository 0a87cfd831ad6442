#!/usr/bin/env bash
# Makes (or reuses) the Python environment the torch tests run in: a venv of its own, outside the
# checkout, kept between runs, because PyPI's torch is the CUDA build (about 5.5 GB installed, 2-3
# minutes to fetch). Usage: scripts/torch-venv.sh VENV. Exit 0: VENV/bin/python imports torch.
# Otherwise the last line printed says why not (too little free disk, no network), and the torch
# tests are skipped for that reason.
set -uo pipefail
venv=$1
need_gib=${MLAKIT_TORCH_DISK_GIB:-12}

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch, numpy, ml_dtypes, safetensors, pytest" 2>/dev/null; then
  echo "torch venv: reusing $venv (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
  exit 0
fi
parent=$(dirname "$venv")
mkdir -p "$parent" || { echo "cannot create $parent"; exit 1; }
free_gib=$(( $(df -Pk "$parent" | awk 'NR == 2 {print $4}') / 1024 / 1024 ))
if [ "$free_gib" -lt "$need_gib" ]; then
  echo "only ${free_gib} GiB free at $parent, torch needs ${need_gib} GiB"
  exit 1
fi
rm -rf "$venv"
python3 -m venv "$venv" || { echo "python3 -m venv failed"; exit 1; }
# --no-cache-dir: the wheels would take another 3 GB in pip's cache.
if ! "$venv/bin/pip" install -q --no-cache-dir torch numpy ml_dtypes safetensors pytest; then
  rm -rf "$venv"
  echo "pip could not install torch (no network to PyPI?)"
  exit 1
fi
echo "torch venv: installed $venv (torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'))"
