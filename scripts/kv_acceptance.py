#!/usr/bin/python3
"""KV-cache acceptance table (docs/kv_cache.md): every KV format, with and without rotation and a residual
window, and eviction at 50 % / 25 % budgets, against an F16-KV baseline on the same windows.

Everything goes through `lowbit eval`: one `eval ppl --kv-cache f16 --save-baseline`, then one
`eval kld --kv-cache SPEC --position-curve --json` per row, all with --kv-step 1 (decode-style: each window is fed
one token per forward call, so residual windows and eviction act as in generation).

Usage: scripts/kv_acceptance.py [--lowbit build/apps/lowbit/lowbit] [--shared ../shared] [--chunks 16]
                                [--model stories260K|kjv] [--out DIR]
Prints one markdown table per model to stdout; keeps the JSON of every row under --out.
"""
import argparse
import json
import os
import subprocess
import sys

MODELS = {
    "stories260K": ("models/stories260K/stories260K.bin", "data/tinystories/tinystories_train_head.txt", 512),
    "kjv": ("models/kjv-brown-6M/model.bin", "data/kjv-brown/val.txt", 256),
}

# (kv-cache, kv-cache-k, kv-cache-v, evict)
ROWS = [
    ("f32", "", "", ""),
    ("bf16", "", "", ""),
    ("e4m3", "", "", ""),
    ("e4m3:head", "", "", ""),
    ("e4m3:token", "", "", ""),
    ("e4m3+rot", "", "", ""),
    ("e5m2", "", "", ""),
    ("int8", "", "", ""),
    ("int8+rot", "", "", ""),
    ("fp4", "", "", ""),
    ("fp4+rot", "", "", ""),
    ("int4", "", "", ""),
    ("int4+rot", "", "", ""),
    ("int4:window32", "", "", ""),
    ("int4:window32+rot", "", "", ""),
    ("int4:asym", "", "", ""),
    ("int4:pertoken", "", "", ""),
    ("int4:pertoken+rot", "", "", ""),
    ("int4:pertoken:window32", "", "", ""),
    ("int4:pertoken:window32+rot", "", "", ""),
    ("int4:prerope", "", "", ""),
    ("int4:keep:0,-1", "", "", ""),
    ("int2:asym", "", "", ""),
    ("int2:asym+rot", "", "", ""),
    ("int2:asym:window32+rot", "", "", ""),
    ("int2:asym:window128+rot", "", "", ""),
    ("f16", "int4:window32", "int2", ""),
    ("f16:paged", "", "", "streaming:4+124"),
    ("f16:paged", "", "", "h2o:50%"),
    ("f16:paged", "", "", "h2o:25%"),
    ("int8", "", "", "h2o:50%"),
    ("int8", "", "", "h2o:25%"),
    ("int4:window32", "", "", "h2o:25%"),
    ("int4:window32+rot", "", "", "streaming:4+124"),
]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 3):
        sys.exit("command failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr))
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowbit", default="build/apps/lowbit/lowbit")
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--model", action="append", choices=sorted(MODELS))
    ap.add_argument("--out", default="out/kv_acceptance")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in a.model or ["stories260K", "kjv"]:
        model, text, ctx = MODELS[name]
        model, text = os.path.join(a.shared, model), os.path.join(a.shared, text)
        base = os.path.join(a.out, name + ".f16kv.lbbase")
        common = ["-m", model, "--ctx", str(ctx), "--chunks", str(a.chunks), "--kv-step", "1", "--no-progress"]
        b = json.loads(run([a.lowbit, "eval", "ppl", "--text", text, "--method", "window", "--kv-cache", "f16",
                            "--save-baseline", base,
                            "--topk", "64", "--json"] + common).stdout)
        print("\n### %s (ctx %d, %d windows = %d scored tokens, F16-KV baseline PPL %.4f)\n" %
              (name, ctx, a.chunks, b["tokens_scored"], b["perplexity"]["ppl"]))
        print("| KV cache | evict | bytes/token | PPL | ΔPPL | KLD | KLD p99 | top-1 | ΔNLL by position (4 quarters of the window) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        for cache, k, v, ev in ROWS:
            cmd = [a.lowbit, "eval", "kld", "--baseline", base, "--text", text, "--kv-cache", cache,
                   "--position-curve", "--buckets", "4", "--json"] + common
            if k:
                cmd += ["--kv-cache-k", k]
            if v:
                cmd += ["--kv-cache-v", v]
            if ev:
                cmd += ["--kv-evict", ev]
            p = run(cmd)
            label = cache + (" k=" + k if k else "") + (" v=" + v if v else "")
            if p.returncode == 3:  # health check failed: NaN/Inf
                print("| %s | %s | | NaN/Inf: %s | | | | | |" % (label, ev or "-", p.stderr.strip()))
                continue
            j = json.loads(p.stdout)
            slug = "".join(c if c.isalnum() else "_" for c in label + "_" + ev)
            with open(os.path.join(a.out, "%s.%s.json" % (name, slug)), "w") as f:
                json.dump(j, f, indent=1)
            c = j["comparison"]
            curve = j["position_curve"]
            d = ["%+.3f" % (vv - bb) for vv, bb in zip(curve["variant"]["mean_nll"], curve["baseline"]["mean_nll"])]
            print("| %s | %s | %.1f | %.4f | %+.4f | %.5f | %.4f | %.2f%% | %s |" %
                  (label, ev or "-", j["kv"]["bytes_per_token_exact"], c["ppl_variant"]["ppl"],
                   c["delta_ppl"]["value"], c["kld"]["mean"], c["kld"]["p99"], 100 * c["top1_agreement"]["value"],
                   " ".join(d)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
