#!/usr/bin/env bash
# Sustained load on `lowbit serve`: C concurrent streaming clients (lowbit bench serve, closed loop) for D seconds,
# then checks what a deployment needs: 0 failed requests, the server's peak RSS (VmHWM), its /metrics counters
# against the client's counts, and a clean SIGTERM exit (code 0). Writes OUT/{client.json,metrics.txt,server.log,
# summary.json} and prints the summary. Exit 0 when every check passes, 1 otherwise.
#
# Usage: scripts/serve_load.sh MODEL [CONCURRENCY=64] [SECONDS=300] [OUT=out/serve_load] [-- extra serve flags]
# Example (docs/serve.md): lowbit fixture --shape qwen2.5-0.5b --format gguf --type q4_0 --out /tmp/q05.gguf
#          scripts/serve_load.sh /tmp/q05.gguf 64 300 out/serve_load -- --kv-cache int8 --max-num-seqs 16
set -euo pipefail
cd "$(dirname "$0")/.."
LOWBIT=${LOWBIT:-build/apps/lowbit/lowbit}
MODEL=${1:?model path}
C=${2:-64}
DUR=${3:-300}
OUT=${4:-out/serve_load}
shift $(($# < 4 ? $# : 4))
[ "${1:-}" = "--" ] && shift
mkdir -p "$OUT"

"$LOWBIT" serve -m "$MODEL" --port 0 "$@" >"$OUT/server.out" 2>"$OUT/server.log" &
PID=$!
trap 'kill -9 $PID 2>/dev/null || true' EXIT
URL=""
for _ in $(seq 600); do  # model load: up to 60 s
  URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$OUT/server.out" 2>/dev/null | head -1 || true)
  [ -n "$URL" ] && break
  kill -0 $PID 2>/dev/null || { echo "serve_load: the server exited:"; cat "$OUT/server.log"; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { echo "serve_load: no listen line after 60 s"; exit 1; }
echo "serve_load: $URL, $C clients for $DUR s" >&2

# Enough requests that the closed loop is still busy at the deadline; --max-duration ends the run.
timeout -k 10 $((DUR + 120)) "$LOWBIT" bench serve --url "$URL" -c "$C" -n 1000000 --max-duration "$DUR" \
  --input-len 64 --range-ratio 0.5 --output-len 64 --seed 1 --timeout 120 --json >"$OUT/client.json" || true
# Queued requests of clients that left are aborted when the server next writes to them (a keep-alive comment
# every 2 s): wait for the engine to drain before reading the counters.
for _ in $(seq 100); do
  curl -s --max-time 10 "$URL/metrics" >"$OUT/metrics.txt"
  awk '/^lowbit_requests_(running|waiting) / {n += $2} END {exit n > 0}' "$OUT/metrics.txt" && break
  sleep 0.1
done
RSS_KB=$(awk '/VmHWM/ {print $2}' /proc/$PID/status)
kill -TERM $PID
RC=0
for _ in $(seq 300); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
if kill -0 $PID 2>/dev/null; then RC=124; else wait $PID || RC=$?; fi
trap - EXIT

/usr/bin/python3 - "$OUT" "$RSS_KB" "$RC" <<'EOF'
import json, re, sys
out, rss_kb, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = json.load(open(f"{out}/client.json"))
metrics = {}
for line in open(f"{out}/metrics.txt"):
    m = re.match(r'^([a-z_]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$', line.strip())
    if m:
        metrics[m.group(1) + (m.group(2) or "")] = float(m.group(3))
def metric(prefix):
    return sum(v for k, v in metrics.items() if k.startswith(prefix))
req = client["requests"]
ok, failed, cancelled = req["ok"], req["failed"], req.get("cancelled", 0)
finished = metric('lowbit_engine_requests_total{outcome="finished"}')
aborted = metric('lowbit_engine_requests_total{outcome="aborted"}')
s = {
    "clients": client.get("load"), "duration_seconds": client["duration_seconds"],
    "client": {"ok": ok, "failed": failed, "cancelled_at_deadline": cancelled, "failures": req.get("failures"),
               "output_tokens": client["output_tokens"], "output_tok_per_s": client["output_throughput"],
               "request_per_s": client["request_throughput"]},
    "server": {"finished": finished, "aborted": aborted, "failed": metric('lowbit_engine_requests_total{outcome="failed"}'),
               "generation_tokens": metric("lowbit_generation_tokens_total"),
               "http_responses": {k: v for k, v in metrics.items() if k.startswith("lowbit_http_responses_total")}},
    "peak_rss_mib": round(rss_kb / 1024, 1),
    "sigterm_exit_code": rc,
}
# Every request the client sent the server ended: finished (every one the client completed, plus any that
# completed just as the client gave up at the deadline) or aborted when the connection closed.
checks = {"no_failures": failed == 0 and ok > 0, "server_saw_every_request": finished + aborted == ok + cancelled + failed,
          "client_ok_finished_on_server": finished >= ok, "clean_exit": rc == 0}
s["checks"] = checks
json.dump(s, open(f"{out}/summary.json", "w"), indent=2)
print(json.dumps(s, indent=2))
sys.exit(0 if all(checks.values()) else 1)
EOF
