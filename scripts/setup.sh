#!/usr/bin/env bash
# Installs every Debian package lowbit's build, tests, fuzzers and reports need, then configures and builds.
# Idempotent: packages already present are skipped; the build is incremental.
# Usage: scripts/setup.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build}"

PKGS=(build-essential cmake ninja-build git pkg-config
      libgtest-dev libgmock-dev googletest libbenchmark-dev
      nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libeigen3-dev libssl-dev libomp-dev
      clang-16 libclang-rt-16-dev python3-numpy)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${LOWBIT_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
