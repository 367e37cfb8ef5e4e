#!/usr/bin/env python3
"""Cuts a (quantized) Hugging Face checkpoint directory down to a fuzz seed for fuzz_quantized_checkpoint:
<config.json> NUL <model.safetensors>, keeping layer 0 only and the first 64 rows of 16/32-bit embeddings /
lm_head, with config.json changed to agree (num_hidden_layers 1, vocab_size 64).

Usage: cut_checkpoint.py CHECKPOINT_DIR OUT_FILE"""
import json
import struct
import sys

VOCAB = 64
WIDTH = {"F32": 4, "F16": 2, "BF16": 2}


def main(src, dst):
    cfg = json.load(open(src + "/config.json"))
    cfg["num_hidden_layers"] = 1
    cfg["vocab_size"] = VOCAB
    raw = open(src + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out_head, blobs, at = {}, [], 0
    for name, t in head.items():
        if name == "__metadata__":
            out_head[name] = t
            continue
        if ".layers." in name and ".layers.0." not in name:
            continue
        b, e = t["data_offsets"]
        blob = data[b:e]
        if name in ("lm_head.weight", "model.embed_tokens.weight") and t["dtype"] in WIDTH:
            rows, cols = t["shape"]
            blob = blob[:VOCAB * cols * WIDTH[t["dtype"]]]
            t = dict(t, shape=[VOCAB, cols])
        blobs.append(blob)
        out_head[name] = dict(t, data_offsets=[at, at + len(blob)])
        at += len(blob)
    h = json.dumps(out_head).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(json.dumps(cfg).encode() + b"\0" + struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
