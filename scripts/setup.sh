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
      clang-16 libclang-rt-16-dev clang-format-14 python3-numpy python3-jinja2
      libopenblas-dev liblapacke-dev libtorch-dev)
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

# Node and the official openai npm client pinned in tests/serve/package-lock.json (test_server_openai runs it
# against `lowbit serve`; it skips itself without them). Debian's nodejs/npm only where missing; npm ci only when
# the lock file changed since the last install.
node_pkgs=()
command -v node >/dev/null 2>&1 || node_pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || node_pkgs+=(npm)
if [ ${#node_pkgs[@]} -gt 0 ]; then
  echo "setup: installing ${node_pkgs[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${node_pkgs[@]}"
fi
lock_sum="$(sha256sum tests/serve/package-lock.json | cut -d' ' -f1)"
stamp=tests/serve/node_modules/.lowbit-lock-sha256
if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  echo "setup: npm ci --prefix tests/serve (the openai client for test_server_openai)"
  if npm ci --prefix tests/serve --no-audit --no-fund --loglevel=error; then
    echo "$lock_sum" > "$stamp"
  else
    echo "setup: warning: npm ci failed (no registry access?); test_server_openai will be skipped" >&2
  fi
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release ${LOWBIT_CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
