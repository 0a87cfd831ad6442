#!/usr/bin/env bash
# Installs the Debian packages mlakit needs (when missing), configures and builds it in build/.
# Extra arguments go to CMake's configure step (e.g. -DMLAKIT_WERROR=ON).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/packages.sh

# The CUDA back-end is built when nvcc exists (CUDA's default install path included).
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
