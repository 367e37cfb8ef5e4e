#!/usr/bin/env bash
# Configures and builds build-san/: ONE clang-16 build with ASan + UBSan and libFuzzer coverage
# (-fsanitize=fuzzer-no-link) on every library, so the same objects give both the sanitized test suite
# (scripts/ci_sanitize.sh) and the libFuzzer targets (scripts/ci_fuzz.sh): one build instead of two on CI.
# -O1 + line tables: sanitizer reports with file:line, at about half the compile time of -O2 -g.
# Without the train rung (libtorch: SpinQuant), whose tests ci_sanitize.sh leaves to the README stage.
#
# Usage: scripts/ci_san_build.sh [target...]   (default: everything; env LOWBIT_SAN_BUILD, LOWBIT_SAN_TESTS=OFF)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${LOWBIT_SAN_BUILD:-build-san}"
TESTS="${LOWBIT_SAN_TESTS:-ON}"
JOBS="${LOWBIT_SAN_JOBS:-$(nproc)}"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -fsanitize=fuzzer-no-link"

# clang-16 ships no OpenMP runtime here; point FindOpenMP at the installed LLVM libomp (libomp-dev) if present.
OMP_ARGS=()
OMP_LIB="$(ls /usr/lib/llvm-*/lib/libomp.so 2>/dev/null | sort -V | tail -1 || true)"
if [ -n "$OMP_LIB" ]; then
  # Only omp.h: that clang's whole resource include dir would shadow clang-16's own stdint.h etc.
  OMP_INC="$PWD/$BUILD/omp-include"
  mkdir -p "$OMP_INC"
  ln -sf "$(ls "$(dirname "$OMP_LIB")"/clang/*/include/omp.h | sort -V | tail -1)" "$OMP_INC/omp.h"
  OMP_ARGS=(-DOpenMP_CXX_FLAGS="-fopenmp=libomp -I$OMP_INC" -DOpenMP_CXX_LIB_NAMES=omp -DOpenMP_omp_LIBRARY="$OMP_LIB")
fi
CC=clang-16 CXX=clang++-16 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=San \
  -DCMAKE_CXX_FLAGS_SAN="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS="$SAN" \
  -DLOWBIT_BUILD_FUZZ=ON -DLOWBIT_BUILD_TESTS="$TESTS" -DLOWBIT_BUILD_BENCH=OFF -DLOWBIT_BUILD_TRAIN=OFF "${OMP_ARGS[@]}" >/dev/null
ninja -C "$BUILD" -j"$JOBS" ${LOWBIT_SAN_NINJA_ARGS:-} "$@"
