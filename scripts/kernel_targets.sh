#!/bin/bash
# Decode / prefill targets of docs/kernels.md: every weight format on a 0.5B- (or 1B-) shaped fixture, 2 threads,
# decode as a fraction of the measured read-bandwidth bound (lowbit bench), in one run.
# (q4_k cannot be applied online to a 0.5B shape: its 896-wide rows are not whole 256-element super-blocks; the
# Q4_K_M file from llama-quantize, which falls back to other types for such rows, is measured instead.)
# Usage: scripts/kernel_targets.sh [FIXTURE_DIR] [GGUF_DIR]   (defaults: /tmp/q05, /tmp)
#   FIXTURE_DIR: lowbit fixture --shape qwen2.5-0.5b --format hf --out /tmp/q05
#   GGUF_DIR/q05-{q4_0,q8_0,q4_k_m}.gguf: lowbit fixture --format gguf --type q4_0 ... (q4_k_m from llama-quantize)
set -euo pipefail
LB=${LB:-build/apps/lowbit/lowbit}
M=${1:-/tmp/q05}
G=${2:-/tmp}
T=${THREADS:-2}
BW=$($LB bench --bandwidth --json -t "$T" 2>/dev/null | /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.2f" % (max(r["read_bytes_per_second"] for r in j["bandwidth"]) / 1e9))')
echo "read bandwidth ($T threads): $BW GB/s"
echo "| weights | size | kernel(s) | pp64 t/s | tg32 t/s | bytes/token | bound t/s | of bound |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
row() {  # label, then bench args
  local label=$1; shift
  $LB bench "$@" -p 64 -n 32 -r 3 -t "$T" --bw "$BW" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin); d = j["decode"]; p = j.get("prefill", {})
k = ", ".join(sorted(j["kernels"].keys()))
print("| %s | %.0f MiB | %s | %.1f ± %.1f | %.2f ± %.2f | %.0f MiB | %.2f | %.0f %% |" % (sys.argv[1], j["size_bytes"] / 2**20, k,
      p.get("tokens_per_second", 0), p.get("sd", 0), d["tokens_per_second"], d["sd"], d["bytes_per_token"] / 2**20,
      d["bound_tokens_per_second"], 100 * d["fraction_of_bound"]))' "$label"
}
row "bf16 (as stored)" -m "$M"
for q in int8:channel int4:g128 int4:g32 "int4:g32:asym" nf4:g64 mxfp4 nvfp4 e4m3:channel q4_0 q8_0 W8A8; do
  row "$q" -m "$M" --quantize "$q"
done
for f in q4_0 q8_0 q4_k_m; do
  [ -f "$G/q05-$f.gguf" ] && row "GGUF $f file" -m "$G/q05-$f.gguf"
done
