#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-16 in build-fuzz/ and runs each for N seconds (default 30) from a
# generated seed corpus. Crashes are written to build-fuzz/crashes/<target>/ and make the script exit non-zero.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   targets: safetensors gguf llama2c llama2c_tokenizer tokenizer_json (default: all)
# Example: scripts/fuzz.sh 60 gguf
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-30}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(safetensors gguf llama2c llama2c_tokenizer tokenizer_json)
BUILD="${LOWBIT_FUZZ_BUILD:-build-fuzz}"
JOBS="${LOWBIT_FUZZ_JOBS:-2}"
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

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
CC=clang-16 CXX=clang++-16 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLOWBIT_BUILD_FUZZ=ON -DLOWBIT_BUILD_TESTS=OFF -DLOWBIT_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$SAN" \
  "${OMP_ARGS[@]}" >/dev/null
ninja -C "$BUILD" -j"$JOBS" fuzz_make_seeds $(printf 'fuzz_%s ' "${TARGETS[@]}")

SEEDS="$BUILD/seeds"
"$BUILD/fuzz/fuzz_make_seeds" "$SEEDS"
status=0
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t"
  crashes="$BUILD/crashes/$t"
  mkdir -p "$corpus" "$crashes" "$SEEDS/$t"
  echo "== fuzz_$t for ${SECONDS_PER_TARGET}s"
  if ! "$BUILD/fuzz/fuzz_$t" "$corpus" "$SEEDS/$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 \
      -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$crashes/" -print_final_stats=1 2>"$BUILD/fuzz_$t.log"; then
    echo "!! fuzz_$t found a problem; see $BUILD/fuzz_$t.log and $crashes/"
    tail -30 "$BUILD/fuzz_$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$BUILD/fuzz_$t.log" | tail -2
  fi
done
exit $status
