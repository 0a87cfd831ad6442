#!/usr/bin/env bash
# Installs the Debian packages mlakit needs (when missing), configures and builds it in build/.
# Warnings are errors in every build this repository's scripts make, so scripts/test.sh reuses this
# build as it is (the CMake option stays off for projects that add mlakit as a subdirectory).
# Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/packages.sh

# The CUDA back-end is built when nvcc exists (CUDA's default install path included).
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAKIT_WERROR=ON "$@"
cmake --build build -j"$(nproc)"
