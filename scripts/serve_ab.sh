#!/usr/bin/env bash
# lowbit serve next to another OpenAI-compatible server (llama.cpp's llama-server) on the same GGUF file, measured
# by the same client (lowbit bench serve), interleaved per concurrency level so that machine noise hits both alike.
# Each level sends its own seeded random prompts (seed = the level), the same to both servers, so neither reuses
# prompts from an earlier level. Writes OUT/{lowbit,peer}-cC.json and prints one line per server and level.
#
# Usage: scripts/serve_ab.sh MODEL.gguf OUT PEER_SERVER_BINARY [LEVELS="1 4 8 16"] [-- extra lowbit serve flags]
# Example (docs/serve.md): scripts/serve_ab.sh /tmp/q05.gguf out/ab /path/to/llama.cpp/build/bin/llama-server
# The peer is started as: PEER -m MODEL --host 127.0.0.1 --port P -np 16 -c 16384 -t $(nproc) (llama-server's
# flags: 16 slots of 1024 tokens, as lowbit's --max-num-seqs 16 --max-model-len 1024).
set -euo pipefail
cd "$(dirname "$0")/.."
LOWBIT=${LOWBIT:-build/apps/lowbit/lowbit}
MODEL=${1:?model.gguf}
OUT=${2:?output folder}
PEER=${3:?peer server binary}
LEVELS=${4:-1 4 8 16}
shift $(($# < 4 ? $# : 4))
[ "${1:-}" = "--" ] && shift
mkdir -p "$OUT"
"$LOWBIT" serve -m "$MODEL" --port 0 --max-model-len 1024 --max-num-seqs 16 --kv-cache f16 "$@" \
  >"$OUT/lowbit.out" 2>"$OUT/lowbit.log" &
P1=$!
PORT2=$((20000 + RANDOM % 20000))
"$PEER" -m "$MODEL" --host 127.0.0.1 --port $PORT2 -np 16 -c 16384 -t "$(nproc)" >"$OUT/peer.log" 2>&1 &
P2=$!
trap 'kill $P1 $P2 2>/dev/null || true' EXIT
URL1=""
for _ in $(seq 300); do
  URL1=$(grep -o 'http://[0-9.]*:[0-9]*' "$OUT/lowbit.out" 2>/dev/null | head -1 || true)
  [ -n "$URL1" ] && curl -s --max-time 2 "http://127.0.0.1:$PORT2/health" | grep -q ok && break
  sleep 0.5
done
for c in $LEVELS; do
  n=$((c < 4 ? 8 : 2 * c))
  for s in lowbit peer; do
    url=$([ $s = lowbit ] && echo "$URL1" || echo "http://127.0.0.1:$PORT2")
    timeout 900 "$LOWBIT" bench serve --url "$url" -n $n -c $c --input-len 64 --output-len 64 --seed $c --json \
      >"$OUT/$s-c$c.json" 2>/dev/null || true
    /usr/bin/python3 -c "
import json; d=json.load(open('$OUT/$s-c$c.json')); l=d['latency_ms']
print('%-6s c=%-2d ok=%d failed=%d output %.1f tok/s  TTFT p50 %.0f p90 %.0f ms  TPOT p50 %.1f ms  prompt %d output %d tokens' % (
  '$s', $c, d['requests']['ok'], d['requests']['failed'], d['output_throughput'], l['ttft']['p50'], l['ttft']['p90'],
  l['tpot']['p50'], d['prompt_tokens'], d['output_tokens']))"
  done
done
