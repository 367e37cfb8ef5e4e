#!/bin/bash
# Decode / prefill targets of docs/kernels.md: every weight format on a 0.5B- (or 1B-) shaped fixture, 2 threads,
# decode as a fraction of the measured read-bandwidth bound (lowbit bench), in one run. lowbit bench probes the read
# bandwidth right after each decode repetition and compares each repetition with its own probe (mean ± sd of those
# fractions): on this (virtual) machine the bandwidth drifts by 20-30 % within a minute, so one probe at the start
# would mis-state later rows.
# (q4_k cannot be applied online to a 0.5B shape: its 896-wide rows are not whole 256-element super-blocks; the
# Q4_K_M file from llama-quantize, which falls back to other types for such rows, is measured instead.)
# Usage: scripts/kernel_targets.sh [FIXTURE_DIR] [GGUF_DIR] [GGUF_PREFIX]   (defaults: /tmp/q05, /tmp, q05)
#   FIXTURE_DIR: lowbit fixture --shape qwen2.5-0.5b --format hf --out /tmp/q05
#   GGUF_DIR/GGUF_PREFIX-{q4_0,q8_0,q4_k_m}.gguf: lowbit fixture --format gguf --type q4_0 ... (q4_k_m from
#   llama-quantize); missing files are skipped. 1B: scripts/kernel_targets.sh /tmp/l1b /tmp l1b
# Side by side with llama.cpp (issue acceptance on AMX hosts): LLAMA_BENCH=/path/to/llama-bench (built outside
# this repository) runs `llama-bench -p 64 -n 32 -t THREADS -r 3` on each GGUF file, alternating with lowbit's row
# for ROUNDS rounds (default 3), and prints the median ratios lowbit / llama.cpp per file, and every lowbit
# format's prefill over llama.cpp's Q4_0 prefill.
set -euo pipefail
LB=${LB:-build/apps/lowbit/lowbit}
M=${1:-/tmp/q05}
G=${2:-/tmp}
P=${3:-q05}
T=${THREADS:-2}
LLAMA_BENCH=${LLAMA_BENCH:-}
ROUNDS=${ROUNDS:-3}
ROWS=$(mktemp)
trap 'rm -f "$ROWS"' EXIT
echo "| weights | size | kernel(s) | pp64 t/s | tg32 t/s | bytes/token | read GB/s (per rep.) | bound t/s | of bound |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|"
row() {  # label, then bench args
  local label=$1; shift
  $LB bench "$@" -p 64 -n 32 -r 3 -t "$T" --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin); d = j["decode"]; p = j.get("prefill", {})
k = ", ".join(sorted(j["kernels"].keys()))
bw = " / ".join("%.1f" % (b / 1e9) for b in d["read_bandwidth_per_repetition"])
print("| %s | %.0f MiB | %s | %.1f ± %.1f | %.2f ± %.2f | %.0f MiB | %s | %.2f | %.0f ± %.0f %% |" % (sys.argv[1],
      j["size_bytes"] / 2**20, k, p.get("tokens_per_second", 0), p.get("sd", 0), d["tokens_per_second"], d["sd"],
      d["bytes_per_token"] / 2**20, bw, d["bound_tokens_per_second"], 100 * d["fraction_of_bound"],
      100 * d["fraction_of_bound_sd"]))
with open(sys.argv[2], "a") as f:
    f.write(json.dumps({"engine": "lowbit", "label": sys.argv[1], "pp": p.get("tokens_per_second", 0),
                        "tg": d["tokens_per_second"]}) + "\n")' "$label" "$ROWS"
}
llama_row() {  # label, GGUF file
  "$LLAMA_BENCH" -m "$2" -p 64 -n 32 -t "$T" -r 3 -o json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
runs = json.load(sys.stdin)
pp = next(r["avg_ts"] for r in runs if r["n_prompt"] > 0 and r["n_gen"] == 0)
tg = next(r["avg_ts"] for r in runs if r["n_gen"] > 0 and r["n_prompt"] == 0)
print("| llama.cpp: %s | | llama-bench | %.1f | %.2f | | | | |" % (sys.argv[1], pp, tg))
with open(sys.argv[2], "a") as f:
    f.write(json.dumps({"engine": "llama.cpp", "label": sys.argv[1], "pp": pp, "tg": tg}) + "\n")' "$1" "$ROWS"
}
row "bf16 (as stored)" -m "$M"
for q in int8:channel int4:g128 int4:g32 "int4:g32:asym" nf4:g64 mxfp4 nvfp4 e4m3:channel q4_0 q8_0 W8A8 W4A8; do
  row "$q" -m "$M" --quantize "$q"
done
for f in q4_0 q8_0 q4_k_m; do
  [ -f "$G/$P-$f.gguf" ] || continue
  if [ -z "$LLAMA_BENCH" ]; then
    row "GGUF $f file" -m "$G/$P-$f.gguf"
    continue
  fi
  for ((r = 0; r < ROUNDS; r++)); do  # interleaved: the machine's drift hits both engines alike
    row "GGUF $f file" -m "$G/$P-$f.gguf"
    llama_row "GGUF $f file" "$G/$P-$f.gguf"
  done
done
[ -n "$LLAMA_BENCH" ] || exit 0
/usr/bin/python3 - "$ROWS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda eng, label, k: statistics.median([r[k] for r in rows if r["engine"] == eng and r["label"] == label] or [0])
files = [l for l in dict.fromkeys(r["label"] for r in rows if r["engine"] == "llama.cpp")]
print("\n| GGUF file | lowbit pp64 | llama.cpp pp64 | ratio | lowbit tg32 | llama.cpp tg32 | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|")
for f in files:
    lp, cp, lt, ct = med("lowbit", f, "pp"), med("llama.cpp", f, "pp"), med("lowbit", f, "tg"), med("llama.cpp", f, "tg")
    print("| %s | %.1f | %.1f | %.2fx | %.2f | %.2f | %.2fx |" % (f, lp, cp, lp / cp if cp else 0, lt, ct,
                                                                lt / ct if ct else 0))
q40 = med("llama.cpp", "GGUF q4_0 file", "pp")
if q40:
    print("\n| lowbit format | pp64 | over llama.cpp's Q4_0 pp64 (%.1f) |" % q40)
    print("|---|---:|---:|")
    for label in dict.fromkeys(r["label"] for r in rows if r["engine"] == "lowbit" and not r["label"].startswith("GGUF")):
        print("| %s | %.1f | %.2fx |" % (label, med("lowbit", label, "pp"), med("lowbit", label, "pp") / q40))
PY
