#!/usr/bin/env bash
# Installs the Debian packages mlakit needs to build and test, when missing (as root, or through
# sudo).
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libtbb-dev nlohmann-json3-dev
          libcli11-dev libopenblas-dev libdnnl-dev libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv python3-dev clang)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

