#!/usr/bin/env bash
# Rebuilds the checked-in seed corpus fuzz/corpus/<target>/ that CI's fuzz stage (scripts/ci_fuzz.sh) starts
# from. Seeds: fuzz_make_seeds (the writers, plus cut-down files from ../shared) and the lowbit CLI (fixture
# models, quantized checkpoints, an evaluation baseline), each cut to a small size; libFuzzer's -merge=1 then
# keeps only the seeds that add coverage. Never copies a big shared file: every seed is a small derived input.
# The checked-in corpus is seeds only (about 200 KiB in all): CI grows its own copy for 25 s per target.
# GROW_SECONDS > 0 also fuzzes each target that long and merges what it found (hundreds of files, MiBs: for
# local use, not for checking in).
#
# Usage: fuzz/make_corpus.sh [GROW_SECONDS (default 0)] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
GROW="${1:-0}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=($(scripts/ci_fuzz.sh --list))
BUILD="${LOWBIT_SAN_BUILD:-build-san}"
SHARED="${LOWBIT_SHARED_DIR:-../shared}"
scripts/ci_san_build.sh lowbit fuzz_make_seeds $(printf 'fuzz_%s ' "${TARGETS[@]}")

SEEDS="$(mktemp -d /tmp/lowbit_seeds.XXXXXX)"
trap 'rm -rf "$SEEDS"' EXIT
LB="$BUILD/apps/lowbit/lowbit"
mkdir -p "$BUILD/fuzz-crashes"
"$BUILD/fuzz/fuzz_make_seeds" "$SEEDS" "$SHARED"
export ASAN_OPTIONS=detect_leaks=0  # the CLI here only makes seeds; ci_sanitize.sh checks it for leaks

# Fixture GGUFs (real metadata key sets and tokenizers), cut to their metadata and tiny tensors.
for spec in tiny-llama:q4_0 tiny-qwen3:q8_0 tiny-llama3:f16; do
  shape="${spec%%:*}"
  "$LB" fixture --shape "$shape" --format gguf --type "${spec##*:}" --out "$SEEDS/$shape.gguf" >/dev/null
  "$BUILD/fuzz/fuzz_make_seeds" --cut-gguf "$SEEDS/$shape.gguf" "$SEEDS/gguf_model/$shape"
  cp "$SEEDS/gguf_model/$shape" "$SEEDS/gguf/$shape"
done

# Quantized checkpoints of a tiny fixture, one per safetensors layout family, cut to one layer and a 64-token
# vocabulary (config and tensors still agree) so each stays a few tens of KB.
"$LB" fixture --shape tiny-lmhead-only --format hf --out "$SEEDS/hf" >/dev/null
for recipe in W4A16,group=32 int3:g32:asym:f16 NVFP4 nf4:g64; do
  name="$(echo "$recipe" | tr ':,=' '___')"
  "$LB" quantize -m "$SEEDS/hf" --recipe "$recipe" -o "$SEEDS/q-$name" -q >/dev/null
  python3 fuzz/cut_checkpoint.py "$SEEDS/q-$name" "$SEEDS/quantized_checkpoint/$name"
done
# The same INT4 checkpoint in the GPTQ and AWQ layouts (quant_method gptq / awq: model/hub_layouts.h).
"$LB" quantize -m "$SEEDS/hf" --recipe int4:g32:asym -o "$SEEDS/q-int4asym" -q >/dev/null
for to in gptq awq; do
  "$LB" export -m "$SEEDS/q-int4asym" --to "$to" -o "$SEEDS/q-$to" >/dev/null
  python3 fuzz/cut_checkpoint.py "$SEEDS/q-$to" "$SEEDS/quantized_checkpoint/$to-int4-g32-asym"
done
# Fixture config.json files (every architecture flag) as HF-directory seeds with the small synthetic shard.
for shape in tiny-llama tiny-qwen2 tiny-qwen3 tiny-mistral tiny-llama3; do
  "$LB" fixture --shape "$shape" --format hf --out "$SEEDS/hf-$shape" >/dev/null
  { cat "$SEEDS/hf-$shape/config.json"; printf '\0\0'; cat "$SEEDS/safetensors/seed1"; } >"$SEEDS/hf_checkpoint/$shape"
done

# An evaluation baseline of the 260K-parameter model over a few short windows.
"$LB" eval ppl -m "$SHARED/models/stories260K/stories260K.bin" --text "$SHARED/data/tinystories/tinystories_train_head.txt" \
  --ctx 16 --chunks 2 --topk 4 --save-baseline "$SEEDS/baseline/stories260K.lbb" >/dev/null

# lowbit serve request bodies (selector byte: bit 0 chat, bits 1-2 the chat template) and server streams as
# lowbit serve and llama-server send them (stream NUL /metrics text).
mkdir -p "$SEEDS/openai_request" "$SEEDS/sse"
printf '\0{"model":"m","prompt":"a b","max_tokens":4,"temperature":0.5,"top_p":0.9,"seed":1,"stop":["b"],"logprobs":2,"stream":true,"stream_options":{"include_usage":true}}' \
  >"$SEEDS/openai_request/completion"
printf '\0{"prompt":[1,300,301],"max_tokens":2,"n":1,"ignore_eos":true,"presence_penalty":0.5}' >"$SEEDS/openai_request/ids"
printf '\3{"messages":[{"role":"system","content":"a"},{"role":"user","content":[{"type":"text","text":"b"}]}],"max_completion_tokens":3,"logprobs":true,"top_logprobs":1}' \
  >"$SEEDS/openai_request/chat"
printf '\7{"messages":[{"role":"user","content":"the"}],"max_tokens":-1,"stop":"x","frequency_penalty":3}' >"$SEEDS/openai_request/bad"
printf '\1{"messages":[{"role":"user","content":"a"}],"n":3,"seed":2,"logit_bias":{"5":-100,"261":2.5},"response_format":{"type":"text"},"tools":[],"tool_choice":"none"}' \
  >"$SEEDS/openai_request/choices"
printf '\5data: {"choices":[{"text":" a","index":0,"finish_reason":null}]}\r\n\r\n: keep-alive\n\ndata: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\ndata: [DONE]\n\n\0# TYPE lowbit_requests_total counter\nlowbit_requests_total{outcome="finished"} 3\nlowbit_kv_pages_free 12\n' \
  >"$SEEDS/sse/lowbit"
printf '\1data: {"choices":[{"delta":{"role":"assistant"}}]}\n\ndata: {"choices":[{"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":{"completion_tokens":1}}\n\ndata: {"error":{"message":"x"}}\n\ndata: [DONE]\n\n\0llamacpp:prompt_tokens_total 10\nllamacpp:tokens_predicted_total 5\n' \
  >"$SEEDS/sse/llama"

# Chat templates in the styles models ship (ChatML/Qwen, Llama-3, Llama-2 with raise_exception, Gemma with
# namespace(), DeepSeek with selectattr, a macro), as in tests/serve/test_jinja.cpp.
mkdir -p "$SEEDS/jinja"
cp fuzz/corpus/jinja/* "$SEEDS/jinja/" 2>/dev/null || true

for t in "${TARGETS[@]}"; do
  dst="fuzz/corpus/$t"
  max_len="$(scripts/ci_fuzz.sh --max-len "$t")"
  work="$SEEDS/work-$t"
  mkdir -p "$work" "$SEEDS/$t"
  # Seeds bigger than max_len would be truncated by libFuzzer: keep them out rather than check in torsos.
  find "$SEEDS/$t" -type f -size +"$max_len"c -print -delete | sed 's/^/too big, skipped: /'
  "$BUILD/fuzz/fuzz_$t" -merge=1 -max_len="$max_len" "$work" "$SEEDS/$t" 2>/dev/null
  if [ "$GROW" -gt 0 ]; then
    "$BUILD/fuzz/fuzz_$t" "$work" -max_total_time="$GROW" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="$BUILD/fuzz-crashes/corpus-$t-" 2>/dev/null ||
      echo "!! fuzz_$t failed while growing the corpus: $BUILD/fuzz-crashes/"
  fi
  rm -rf "$dst"
  mkdir -p "$dst"
  "$BUILD/fuzz/fuzz_$t" -merge=1 -max_len="$max_len" "$dst" "$work" 2>/dev/null
  echo "$t: $(ls "$dst" | wc -l) files, $(cat "$dst"/* | wc -c) bytes"
done
