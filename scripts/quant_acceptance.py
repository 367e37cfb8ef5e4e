#!/usr/bin/python3
"""PTQ acceptance table (docs/quant.md): recipes x (bpw, PPL, ΔPPL, KLD, top-1) on both real models, evaluated on
TinyStories and WikiText text held out from calibration, against the float32 model.

Held-out splits (made under --out): WikiText-2 test = first half (calibration) / second half (evaluation);
TinyStories head = first 100,000 bytes (calibration) / last 97,000 bytes (evaluation). kjv-brown-6M calibrates on
the WikiText half, stories260K on the TinyStories half; both are evaluated on both evaluation halves.

Everything goes through the CLI: `lowbit eval ppl --save-baseline` (float32), `lowbit quantize -r RECIPE -c CALIB`,
`lowbit inspect --json` (bits per weight), `lowbit eval kld --json`.

Usage: scripts/quant_acceptance.py [--lowbit build/apps/lowbit/lowbit] [--shared ../shared] [--chunks 24]
                                   [--model kjv|stories260K] [--out out/quant_acceptance]
                                   [--set ptq|rotations|nonuniform|kquants|tune] [--only LABEL_TEXT ...]
Prints one markdown table per model; keeps checkpoints and JSON under --out.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

# name: (checkpoint under --shared, calibration half, group for the g128 presets W4A16 / W4A4KV4 or None, R3).
# stories260K's rows have 64 columns, so g128 does not fit (`lowbit quantize` refuses it: "group size 128 does not
# fit matrix [64, 64]"); its W4A16 / W4A4KV4 recipes get group=64, the largest group that does.
# R3 (the KV cache's Hadamard on q/k after RoPE, `--kv-cache int4+rot`) for rotated KV4 recipes: on stories260K's
# 8-wide heads it costs more than it gains (docs/kv_cache.md), so that model's rows use the plain int4 cache.
MODELS = {
    "kjv": ("models/kjv-brown-6M/model.bin", "wiki", None, True),
    "stories260K": ("models/stories260K/stories260K.bin", "stories", 64, False),
}


def fit_recipe(recipe, group):
    """`recipe` with group=GROUP after a g128 preset (W4A16, W4A4KV4) when the model needs a smaller group."""
    head, _, rest = recipe.partition(",")
    if group is None or head not in ("W4A16", "W4A4KV4"):
        return recipe
    return head + ",group=%d" % group + ("," + rest if rest else "")


RECIPES = []
for algo, label in (("", "RTN"), ("imatrix", "imatrix-RTN"), ("gptq", "GPTQ"), ("awq", "AWQ")):
    for scheme in ("int4:g32:sym", "int4:g64:sym", "int3:g32:sym"):
        RECIPES.append((label + " " + scheme, scheme + (",algo=" + algo if algo else "")))
RECIPES += [
    ("NF4 (g64, f32 absmax)", "NF4"),
    ("FP4 E2M1 g32 f16", "e2m1:g32:f16"),
    ("MXFP4", "MXFP4"),
    ("NVFP4 (weight-only)", "NVFP4"),
    ("FP8 weight-only e4m3:channel", "e4m3:channel:f32"),
    ("W8A8 (int8 per-token dynamic act.)", "W8A8"),
    ("W8A8 + SmoothQuant", "W8A8,algo=smoothquant+rtn"),
]

# --set rotations: the same recipes with and without a QuaRot rotation (docs/quant.md, "Rotations").
ROTATION_RECIPES = []
for label, recipe in (("W4A16 RTN", "W4A16"), ("W4A16 GPTQ", "W4A16,algo=gptq"),
                      ("int4 per-channel RTN", "int4:channel:sym"), ("int4 per-channel GPTQ", "int4:channel:sym,algo=gptq"),
                      ("W8A8 RTN", "W8A8")):
    ROTATION_RECIPES.append((label, recipe))
    ROTATION_RECIPES.append((label + " + QuaRot", recipe + ",rotate=quarot"))
# W4A4KV4: 4-bit weights (int4 g128 sym), per-token int4 activations, int4 KV cache (evaluated with
# --kv-cache int4; under QuaRot with the cache's Hadamard rotation of q/k, R3: int4+rot). act_clip=0.9 is
# QuaRot's activation clipping ratio.
for label, recipe in (("W4A4KV4 RTN", "W4A4KV4"), ("W4A4KV4 QuaRot+RTN", "W4A4KV4,rotate=quarot"),
                      ("W4A4KV4 QuaRot+RTN clip 0.9", "W4A4KV4,rotate=quarot,act_clip=0.9"),
                      ("W4A4KV4 QuaRot+GPTQ", "W4A4KV4,rotate=quarot,algo=gptq"),
                      ("W4A4KV4 QuaRot+GPTQ clip 0.9", "W4A4KV4,rotate=quarot,algo=gptq,act_clip=0.9"),
                      ("W4A4KV4 DuQuant+RTN", "W4A4KV4,rotate=duquant"),
                      ("W4A4KV4 DuQuant+GPTQ", "W4A4KV4,rotate=duquant,algo=gptq"),
                      # NVFP4 activations: E2M1 codes in blocks of 16 with E4M3 scales instead of per-token INT4.
                      ("W4A4KV4 NVFP4 act. RTN", "W4A4KV4,act=nvfp4"),
                      ("W4A4KV4 NVFP4 act. GPTQ", "W4A4KV4,act=nvfp4,algo=gptq"),
                      ("W4A4KV4 NVFP4 act. QuaRot+GPTQ", "W4A4KV4,act=nvfp4,rotate=quarot,algo=gptq"),
                      # GPTQ's float target: each layer fits the float model's outputs from the inputs the
                      # quantized layers and the 4-bit activation route give it (gptq.target = float).
                      ("W4A16 GPTQ float target", "W4A16,algo=gptq,target=float"),
                      ("W4A4KV4 QuaRot+GPTQ clip 0.9 float target",
                       "W4A4KV4,rotate=quarot,algo=gptq,act_clip=0.9,target=float"),
                      ("W4A4KV4 NVFP4 act. GPTQ float target", "W4A4KV4,act=nvfp4,algo=gptq,target=float"),
                      ("W4A4KV4 NVFP4 act. QuaRot+GPTQ float target",
                       "W4A4KV4,act=nvfp4,rotate=quarot,algo=gptq,target=float")):
    ROTATION_RECIPES.append((label, recipe))
# SpinQuant: R1 / R2 learned from QuaRot's start (Cayley SGD on the calibration loss with the recipe's 4-bit
# activations, int4 or nvfp4, and the int4+rot KV cache fake-quantized; spin_steps / spin_lr / spin_tokens at
# their defaults).
for label, recipe in (("W4A4KV4 SpinQuant+RTN", "W4A4KV4,rotate=spinquant"),
                      ("W4A4KV4 SpinQuant+GPTQ", "W4A4KV4,rotate=spinquant,algo=gptq"),
                      ("W4A4KV4 NVFP4 act. SpinQuant+GPTQ", "W4A4KV4,act=nvfp4,rotate=spinquant,algo=gptq"),
                      ("W4A4KV4 NVFP4 act. SpinQuant+GPTQ float target",
                       "W4A4KV4,act=nvfp4,rotate=spinquant,algo=gptq,target=float")):
    ROTATION_RECIPES.append((label, recipe))
# NVFP4 activations whose block scales are picked by least squared error (act_scale=mse) instead of
# NVIDIA's bmax / 6 (docs/kernels.md, "Activation routes").
for label, recipe in (("RTN", ""), ("GPTQ", ",algo=gptq"), ("QuaRot+GPTQ", ",rotate=quarot,algo=gptq"),
                      ("QuaRot+GPTQ float target", ",rotate=quarot,algo=gptq,target=float"),
                      ("SpinQuant+GPTQ float target", ",rotate=spinquant,algo=gptq,target=float")):
    ROTATION_RECIPES.append(("W4A4KV4 NVFP4 act. MSE scales " + label, "W4A4KV4,act=nvfp4,act_scale=mse" + recipe))

# --set nonuniform: per-row k-means codebooks (lut2/3/4, docs/formats.md) against the uniform grids and the
# k-quant of the same width, each under RTN, imatrix and GPTQ.
NONUNIFORM_RECIPES = []
for scheme in ("int3:g32:sym", "lut3", "q3_k", "int4:g32:sym", "lut4", "q4_k", "lut2"):
    for algo, label in (("", "RTN"), ("imatrix", "imatrix"), ("gptq", "GPTQ")):
        NONUNIFORM_RECIPES.append((label + " " + scheme, scheme + (",algo=" + algo if algo else "")))

# --set kquants: every GGUF k-quant and IQ4_XS (ggml block layout, fused KPack kernels) under RTN, imatrix-RTN and GPTQ
# (docs/quant.md, "GPTQ and imatrix on the k-quant grids").
KQUANT_RECIPES = []
for scheme in ("q2_k", "q3_k", "iq4_xs", "q4_k", "q5_k", "q6_k"):
    for algo, label in (("", "RTN"), ("imatrix", "imatrix-RTN"), ("gptq", "GPTQ")):
        KQUANT_RECIPES.append((label + " " + scheme, scheme + (",algo=" + algo if algo else "")))

# --set tune: scale tuning after quantization (tune=STEPS, docs/quant.md "Scale tuning") next to the same recipe
# without it.
TUNE_RECIPES = []
for label, recipe in (("W4A16 GPTQ", "W4A16,algo=gptq"), ("GPTQ int4:g32:sym", "int4:g32:sym,algo=gptq"),
                      ("W4A4KV4 NVFP4 act. GPTQ", "W4A4KV4,act=nvfp4,algo=gptq"),
                      ("W4A4KV4 NVFP4 act. QuaRot+GPTQ", "W4A4KV4,act=nvfp4,rotate=quarot,algo=gptq")):
    TUNE_RECIPES.append((label, recipe))
    for steps in (32, 96):
        TUNE_RECIPES.append((label + " + tune %d" % steps, recipe + ",tune=%d" % steps))


def kv_args(recipe, r3):
    """The run-time KV cache a recipe's KV width asks for (the checkpoint records it; eval takes it as a flag)."""
    if "KV4" not in recipe.split(",")[0]:
        return []
    return ["--kv-cache", "int4+rot" if r3 and "rotate=" in recipe else "int4"]


def run(cmd, ok=(0,)):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in ok:
        sys.exit("command failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr[-2000:]))
    return p


def split_texts(shared, out):
    wiki = open(os.path.join(shared, "data/wikitext-2-raw/wiki.test.raw"), "rb").read()
    stories = open(os.path.join(shared, "data/tinystories/tinystories_train_head.txt"), "rb").read()
    parts = {
        "wiki_calib": wiki[: len(wiki) // 2],
        "wiki_eval": wiki[len(wiki) // 2:],
        "stories_calib": stories[:100000],
        "stories_eval": stories[-97000:],
    }
    paths = {}
    for k, v in parts.items():
        paths[k] = os.path.join(out, k + ".txt")
        with open(paths[k], "wb") as f:
            f.write(v)
    return paths


EVAL_TEXTS = ("stories_eval", "wiki_eval")


def float32_baselines(lb, model, name, texts, out, chunks):
    """The float32 model's logits on each evaluation half (`chunks` windows of 256 tokens), saved for eval kld:
    {text key: (baseline file, PPL, tokens scored)}."""
    base = {}
    for ev in EVAL_TEXTS:
        bf = os.path.join(out, "%s.%s.lbbase" % (name, ev))
        j = json.loads(run([lb, "eval", "ppl", "-m", model, "--text", texts[ev], "--dtype", "f32", "--save-baseline",
                            bf, "--json", "--ctx", "256", "--chunks", str(chunks), "--no-progress"]).stdout)
        base[ev] = (bf, j["perplexity"]["ppl"], j["tokens_scored"])
    return base


def compare(lb, baseline, model, text, extra=()):
    """`lowbit eval kld` of `model` against a saved float32 baseline (same windows): its "comparison" object
    (ppl_variant, delta_ppl, kld, top1_agreement), or None when the model produced NaN/Inf."""
    p = run([lb, "eval", "kld", "--baseline", baseline, "-m", model, "--text", text, "--dtype", "f32", "--json",
             "--no-progress"] + list(extra), ok=(0, 3))
    return None if p.returncode == 3 else json.loads(p.stdout)["comparison"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowbit", default="build/apps/lowbit/lowbit")
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--chunks", type=int, default=24, help="evaluation windows of 256 tokens per text")
    ap.add_argument("--model", action="append", choices=sorted(MODELS))
    ap.add_argument("--out", default="out/quant_acceptance")
    ap.add_argument("--set", choices=("ptq", "rotations", "nonuniform", "kquants", "tune"), default="ptq",
                    help="ptq: the PTQ table; rotations: recipes with and without rotate=quarot; nonuniform: "
                    "lut2/3/4 codebooks against int3/int4 g32 and q3_k/q4_k under RTN, imatrix, GPTQ; kquants: "
                    "q2_k..q6_k under RTN, imatrix, GPTQ; tune: recipes with and without scale tuning")
    ap.add_argument("--only", action="append", default=[],
                    help="run only the recipes whose label contains this text (repeatable), e.g. SpinQuant")
    a = ap.parse_args()
    recipes = {"rotations": ROTATION_RECIPES, "nonuniform": NONUNIFORM_RECIPES, "kquants": KQUANT_RECIPES,
               "tune": TUNE_RECIPES}.get(a.set, RECIPES)
    os.makedirs(a.out, exist_ok=True)
    texts = split_texts(a.shared, a.out)
    LB = a.lowbit
    for name in a.model or ["kjv", "stories260K"]:
        rel, calib_key, group, r3 = MODELS[name]
        model = os.path.join(a.shared, rel)
        base = float32_baselines(LB, model, name, texts, a.out, a.chunks)
        print("\n### %s (calibration: %s, 32 x 256 tokens; float32 PPL: TinyStories %.3f over %d tokens, "
              "WikiText %.3f over %d tokens)\n" % (name, calib_key + "_calib", base["stories_eval"][1],
                                                   base["stories_eval"][2], base["wiki_eval"][1],
                                                   base["wiki_eval"][2]))
        print("| recipe (`--recipe`) | bpw | TinyStories PPL | ΔPPL | KLD | top-1 | WikiText PPL | ΔPPL | KLD | top-1 "
              "| quantize s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for label, recipe in recipes:
            if a.only and not any(o in label for o in a.only):
                continue
            recipe = fit_recipe(recipe, group)
            ck = os.path.join(a.out, "ck", name + "." + "".join(c if c.isalnum() else "_" for c in recipe))
            shutil.rmtree(ck, ignore_errors=True)
            t0 = time.time()
            # Orders without a construction (stories260K's FFN 172) take their Hadamard from the shared table.
            rcmd = recipe + (",rotate_factors=" + os.path.join(a.shared, "data/hadamard/hadamards.safetensors")
                             if "rotate=" in recipe else "")
            run([LB, "quantize", "-m", model, "-r", rcmd, "-c", texts[calib_key + "_calib"], "--samples", "32",
                 "--length", "256", "-o", ck, "-q"])
            qs = time.time() - t0
            ins = json.loads(run([LB, "inspect", ck, "--json"]).stdout)
            bpw = ins["summary"]["bits_per_weight_quantized"]
            cells = []
            for ev in EVAL_TEXTS:
                c = compare(LB, base[ev][0], ck, texts[ev], kv_args(recipe, r3))
                if c is None:
                    cells += ["NaN/Inf", "", "", ""]
                    continue
                cells += ["%.3f" % c["ppl_variant"]["ppl"], "%+.3f" % c["delta_ppl"]["value"],
                          "%.5f" % c["kld"]["mean"], "%.2f %%" % (100 * c["top1_agreement"]["value"])]
            print("| %s `%s` | %.3f | %s | %.1f |" % (label, recipe, bpw, " | ".join(cells), qs))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
