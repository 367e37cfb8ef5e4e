#!/usr/bin/env bash
# Developer fuzzing: builds the libFuzzer targets with clang-16 (ASan + UBSan) in build-fuzz/ and runs each for
# N seconds (default 30) from the checked-in corpus fuzz/corpus/<target>/ plus freshly generated seeds. New
# inputs collect in build-fuzz/corpus/<target>/; crashes are written to build-fuzz/crashes/<target>/ and make
# the script exit non-zero. CI runs the same targets from build-san/ instead (scripts/ci_fuzz.sh).
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   targets: see scripts/ci_fuzz.sh --list (default: all)
# Example: scripts/fuzz.sh 60 gguf
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-30}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=($(scripts/ci_fuzz.sh --list))
BUILD="${LOWBIT_FUZZ_BUILD:-build-fuzz}"
# The same configuration as CI's build-san/ (incl. its clang-16 OpenMP set-up), without the tests.
LOWBIT_SAN_BUILD="$BUILD" LOWBIT_SAN_TESTS=OFF LOWBIT_SAN_JOBS="${LOWBIT_FUZZ_JOBS:-2}" \
  scripts/ci_san_build.sh fuzz_make_seeds $(printf 'fuzz_%s ' "${TARGETS[@]}")

SEEDS="$BUILD/seeds"
"$BUILD/fuzz/fuzz_make_seeds" "$SEEDS" "${LOWBIT_SHARED_DIR:-../shared}"
status=0
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t"
  crashes="$BUILD/crashes/$t"
  mkdir -p "$corpus" "$crashes" "$SEEDS/$t"
  echo "== fuzz_$t for ${SECONDS_PER_TARGET}s"
  checked_in=()
  [ -d "fuzz/corpus/$t" ] && checked_in=("fuzz/corpus/$t")
  if ! "$BUILD/fuzz/fuzz_$t" "$corpus" "${checked_in[@]}" "$SEEDS/$t" -max_total_time="$SECONDS_PER_TARGET" \
      -max_len="$(scripts/ci_fuzz.sh --max-len "$t")" -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$crashes/" \
      -print_final_stats=1 2>"$BUILD/fuzz_$t.log"; then
    echo "!! fuzz_$t found a problem; see $BUILD/fuzz_$t.log and $crashes/"
    tail -30 "$BUILD/fuzz_$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$BUILD/fuzz_$t.log" | tail -2
  fi
done
exit $status
