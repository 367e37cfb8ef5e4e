#!/usr/bin/env bash
# CI fuzz stage: every libFuzzer target of build-san/ (scripts/ci_san_build.sh) runs for a fixed time from its
# checked-in corpus fuzz/corpus/<target>/ (fuzz/make_corpus.sh rebuilds it), two targets at a time (one per
# core). Each run is bounded (-rss_limit_mb, -timeout per input, a wall-clock timeout) and writes what it finds
# to build-san/fuzz-ci/crashes/<target>/. Prints per target: executions, crashes, leaks, OOMs, timeouts,
# peak RSS; exits non-zero on any finding or abnormal exit.
#
# Usage: scripts/ci_fuzz.sh [SECONDS_PER_TARGET (default 15)] [TARGET...]
#        scripts/ci_fuzz.sh --list | --max-len TARGET
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=(safetensors gguf llama2c llama2c_tokenizer tokenizer_json gguf_model hf_checkpoint quantized_checkpoint
     baseline recipe kv_spec openai_request sse jinja)
# Longest input per target: enough for the seeds (a cut-down quantized checkpoint is the biggest), small enough
# that each execution stays fast.
max_len() {
  case "$1" in
    quantized_checkpoint) echo 65536 ;;
    recipe | kv_spec | openai_request | sse | jinja) echo 4096 ;;
    *) echo 32768 ;;
  esac
}
if [ "${1:-}" = "--list" ]; then
  echo "${ALL[@]}"
  exit 0
fi
if [ "${1:-}" = "--max-len" ]; then
  max_len "$2"
  exit 0
fi
SECS="${1:-${LOWBIT_FUZZ_SECONDS:-15}}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL[@]}")
BUILD="${LOWBIT_SAN_BUILD:-build-san}"
OUT="$BUILD/fuzz-ci"
RSS_MB="${LOWBIT_FUZZ_RSS_MB:-2048}"
PAR="${LOWBIT_FUZZ_JOBS:-2}"
for t in "${TARGETS[@]}"; do
  [ -x "$BUILD/fuzz/fuzz_$t" ] || { echo "ci_fuzz: $BUILD/fuzz/fuzz_$t is missing; run scripts/ci_san_build.sh"; exit 1; }
  [ -d "fuzz/corpus/$t" ] || { echo "ci_fuzz: fuzz/corpus/$t is missing; run fuzz/make_corpus.sh"; exit 1; }
done
rm -rf "$OUT"
mkdir -p "$OUT"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export ASAN_OPTIONS="detect_leaks=1"
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0"

run_one() {
  local t="$1" d="$OUT/$1"
  mkdir -p "$d/corpus" "$d/crashes"
  # New inputs go to $d/corpus (the first directory); the checked-in corpus is only read.
  local rc=0
  timeout -k 10 $((SECS + 120)) "$BUILD/fuzz/fuzz_$t" "$d/corpus" "fuzz/corpus/$t" -max_total_time="$SECS" \
    -max_len="$(max_len "$t")" -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$RSS_MB" -timeout=10 \
    -artifact_prefix="$d/crashes/" -print_final_stats=1 >"$d/log" 2>&1 || rc=$?
  echo "$rc" >"$d/rc"
}
export -f run_one max_len
export OUT BUILD SECS RSS_MB
printf '%s\n' "${TARGETS[@]}" | xargs -P "$PAR" -I{} bash -c 'run_one {}'

status=0
printf '%-22s %10s %8s %7s %6s %5s %8s %9s %4s\n' target execs exec/s crashes leaks ooms timeouts peak_rss rc
for t in "${TARGETS[@]}"; do
  d="$OUT/$t"
  fstat() { grep -o "stat::$1: *[0-9]*" "$d/log" | tail -1 | grep -o '[0-9]*$' || echo "?"; }
  count() { find "$d/crashes" -name "$1-*" | wc -l; }
  crashes=$(count crash) leaks=$(count leak) ooms=$(count oom) timeouts=$(count timeout) rc=$(cat "$d/rc")
  # Sanitizer reports that stop the run without an artifact (e.g. in libFuzzer's own merge) still count.
  if [ "$crashes" -eq 0 ] && [ "$rc" -ne 0 ] && grep -q "ERROR: \(AddressSanitizer\|UndefinedBehaviorSanitizer\|libFuzzer\)" "$d/log"; then
    crashes=1
  fi
  printf '%-22s %10s %8s %7s %6s %5s %8s %6s MB %4s\n' "$t" "$(fstat number_of_executed_units)" \
    "$(fstat average_exec_per_sec)" "$crashes" "$leaks" "$ooms" "$timeouts" "$(fstat peak_rss_mb)" "$rc"
  if [ "$rc" -ne 0 ] || [ $((crashes + leaks + ooms + timeouts)) -ne 0 ]; then
    status=1
    echo "!! fuzz_$t: findings in $d/crashes/, log $d/log; reproduce: $BUILD/fuzz/fuzz_$t <file>"
    grep -m1 -A25 "ERROR:\|==ERROR\|runtime error\|deadly signal" "$d/log" | head -40 || tail -30 "$d/log"
  fi
done
exit $status
