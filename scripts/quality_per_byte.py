#!/usr/bin/python3
"""Quality per byte against llama.cpp (docs/quant.md): for kjv-brown-6M and stories260K, llama.cpp's presets Q8_0,
Q6_K, Q5_K_M, Q4_K_M, IQ4_XS, Q4_0, Q3_K_M, Q2_K, each with and without an importance matrix, as file bytes, bits
per parameter and, on each held-out text, PPL, mean KLD and top-1 agreement against the float32 model; then
lowbit's recipes quantized to each of those file sizes (`lowbit quantize --budget BYTES`).

Every file, llama.cpp's and lowbit's, is measured by the same evaluator: `lowbit eval kld` against the float32
baseline of scripts/quant_acceptance.py (same held-out splits, 24 windows x 256 tokens; kjv-brown-6M calibrates
on the WikiText half, stories260K on the TinyStories half). Every file is measured twice: with the kernels'
activation rounding (8-bit blocks for GGUF types, as llama.cpp computes) and with its own values (`--gguf-acts
q8x2`, FP32 activations); the summary per model gives lowbit's KLD over the best llama.cpp file no larger, both ways.

llama.cpp is built outside this repository and named by --llama-cpp (the folder holding llama-quantize,
llama-imatrix, llama-perplexity and llama-convert-llama2c-to-ggml); without it the llama.cpp rows are skipped.
The F32 GGUF comes from llama.cpp's llama2.c converter (`lowbit convert` reads Hugging Face directories only);
that converter writes a tied embedding twice and a 128-token context, so this script drops the duplicate
`output.weight` (llama.cpp then ties, as for any model without one, and llama-quantize gives `token_embd` the
output tensor's type) and records the llama2.c context length.

  --cross-check PRESET[,PRESET]: also run llama-perplexity --kl-divergence on the WikiText half (ctx 256, 24
  windows; llama-perplexity scores the second half of each window only) for those kjv files, to compare the
  two evaluators.

Usage: scripts/quality_per_byte.py [--llama-cpp DIR] [--model kjv|stories260K|both] [--out out/quality_per_byte]
                                   [--lowbit-recipes 'W4A16,algo=gptq[;RECIPE...]'] [--cross-check Q4_K_M,Q2_K]
Prints one markdown table per model; one JSON file per row under --out/rows.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_acceptance as qa  # noqa: E402  (held-out splits, float32 baselines, eval kld)

PRESETS = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q4_0", "Q3_K_M", "Q2_K")
VOCAB = {"kjv": "models/kjv-brown-6M/tokenizer.bin", "stories260K": "models/stories260K/tok512.bin"}
TEXT_NAMES = {"stories_eval": "TinyStories", "wiki_eval": "WikiText"}


# ---- GGUF rewrite (stdlib): drop a duplicated tied output.weight, set the context length ----

_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _value_end(b, pos, t):
    if t in _SCALAR:
        return pos + struct.calcsize("<" + _SCALAR[t])
    if t == 8:
        return pos + 8 + struct.unpack_from("<Q", b, pos)[0]
    if t == 9:
        et, n = struct.unpack_from("<IQ", b, pos)
        pos += 12
        if et in _SCALAR:
            return pos + n * struct.calcsize("<" + _SCALAR[et])
        for _ in range(n):
            pos = _value_end(b, pos, et)
        return pos
    sys.exit("GGUF value type %d is not known to this script" % t)


def _string(b, pos):
    n = struct.unpack_from("<Q", b, pos)[0]
    return b[pos + 8:pos + 8 + n].decode(), pos + 8 + n


def _pack_string(s):
    e = s.encode()
    return struct.pack("<Q", len(e)) + e


def read_gguf(path):
    """The parts of a GGUF file this script needs: {"bytes", "version", "kvs": [(key, raw entry bytes)],
    "tensors": [[name, dims, ggml type, offset]], "data": offset of the tensor data, "align"}."""
    b = open(path, "rb").read()
    if b[:4] != b"GGUF":
        sys.exit("%s is not a GGUF file" % path)
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", b, 4)
    pos, kvs, align = 24, [], 32
    for _ in range(n_kv):
        key, p = _string(b, pos)
        t = struct.unpack_from("<I", b, p)[0]
        end = _value_end(b, p + 4, t)
        if key == "general.alignment":
            align = struct.unpack_from("<I", b, p + 4)[0]
        kvs.append((key, b[pos:end]))
        pos = end
    tensors = []
    for _ in range(n_tensors):
        name, p = _string(b, pos)
        nd = struct.unpack_from("<I", b, p)[0]
        dims = struct.unpack_from("<%dQ" % nd, b, p + 4)
        t, off = struct.unpack_from("<IQ", b, p + 4 + 8 * nd)
        tensors.append([name, dims, t, off])
        pos = p + 4 + 8 * nd + 12
    return {"bytes": b, "version": version, "kvs": kvs, "tensors": tensors, "align": align,
            "data": (pos + align - 1) // align * align}


GGML_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
              12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 20: "IQ4_NL", 23: "IQ4_XS", 30: "BF16"}


def tensor_types(path):
    """Parameters per ggml type in a GGUF file: what a preset became after llama-quantize's fallbacks."""
    counts = {}
    for _, dims, t, _ in read_gguf(path)["tensors"]:
        n = 1
        for d in dims:
            n *= d
        counts[GGML_NAMES.get(t, str(t))] = counts.get(GGML_NAMES.get(t, str(t)), 0) + n
    return counts


def untie_gguf(src, dst, context_length):
    """Copies GGUF `src` to `dst` without `output.weight` when it holds the same bytes as `token_embd.weight`
    (a tied model written twice), with llama.context_length = `context_length`. Returns True when it dropped it."""
    g = read_gguf(src)
    b, data, align = g["bytes"], g["data"], g["align"]
    kvs = [_pack_string(k) + struct.pack("<II", 4, context_length) if k == "llama.context_length" else raw
           for k, raw in g["kvs"]]
    tensors = g["tensors"]
    version = g["version"]
    by_off = sorted(tensors, key=lambda x: x[3])
    span = {x[0]: (x[3], (by_off[i + 1][3] if i + 1 < len(by_off) else len(b) - data) - x[3])
            for i, x in enumerate(by_off)}
    names = {x[0]: x for x in tensors}

    def raw(name):
        _, dims, t, off = names[name]
        n = 4
        for d in dims:
            n *= d
        return b[data + off:data + off + n] if t == 0 else None

    drop = "output.weight" in names and "token_embd.weight" in names and raw("output.weight") is not None \
        and raw("output.weight") == raw("token_embd.weight")
    kept = [x for x in tensors if not (drop and x[0] == "output.weight")]
    head = b"GGUF" + struct.pack("<IQQ", version, len(kept), len(kvs)) + b"".join(kvs)
    infos, blobs, off = [], [], 0
    for name, dims, t, old in kept:
        infos.append(_pack_string(name) + struct.pack("<I%dQ" % len(dims), len(dims), *dims)
                     + struct.pack("<IQ", t, off))
        o, n = span[name]
        blobs.append(b[data + o:data + o + n])
        off += n
    head += b"".join(infos)
    head += b"\0" * ((len(head) + align - 1) // align * align - len(head))
    with open(dst, "wb") as f:
        f.write(head)
        for blob in blobs:
            f.write(blob)
    return drop


def llama2c_seq_len(path):
    return struct.unpack("<7i", open(path, "rb").read(28))[6]


# ---- one row: a model file measured on both held-out texts ----

def file_bytes(path):
    """A GGUF file's bytes; for a lowbit checkpoint directory what --budget counts: every file but the manifest
    (weights, config, tokenizer: what a GGUF file holds too)."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs
                   if f != "lowbit_manifest.json")
    return os.path.getsize(path)


def measure(lb, base, texts, path, n_params, row):
    row["file_bytes"] = file_bytes(path)
    row["bpw"] = row["file_bytes"] * 8.0 / n_params
    for ev in qa.EVAL_TEXTS:
        c = qa.compare(lb, base[ev][0], path, texts[ev])
        row[ev] = None if c is None else {"ppl": c["ppl_variant"]["ppl"], "kld": c["kld"]["mean"],
                                          "top1": c["top1_agreement"]["value"]}
        c2 = own_values(lb, base[ev][0], path, texts[ev])
        if row[ev] is not None and c2 is not None:
            row[ev]["kld_q8x2"] = c2["kld"]["mean"]
            row[ev]["top1_q8x2"] = c2["top1_agreement"]["value"]
    return row


_OWN_VALUES_ENV = {}


def own_values_env(lb):
    """The environment of own_values' runs, from `lowbit info` once per binary: the avx512 tier where the
    machine's tier rounds weight-only activations to BF16 (avx512bf16, amx)."""
    if lb not in _OWN_VALUES_ENV:
        env = dict(os.environ)
        if json.loads(qa.run([lb, "info", "--json"]).stdout).get("kernel_isa") in ("avx512bf16", "amx"):
            env["LOWBIT_ISA"] = "avx512"
        _OWN_VALUES_ENV[lb] = env
    return _OWN_VALUES_ENV[lb]


def own_values(lb, baseline, model, text):
    """`lowbit eval kld` of a file's own values: the GGUF block kernels with their residual pass (--gguf-acts
    q8x2: activations not rounded to 8-bit blocks) and, on CPUs whose tier rounds the weight-only kernels'
    activations to BF16 (avx512bf16, amx), the avx512 tier, which keeps them in FP32 (docs/kernels.md,
    "Activation routes"). None when the model produced NaN/Inf."""
    p = subprocess.run([lb, "eval", "kld", "--baseline", baseline, "-m", model, "--text", text, "--dtype", "f32",
                        "--json", "--no-progress", "--gguf-acts", "q8x2"], capture_output=True, text=True, env=own_values_env(lb))
    if p.returncode not in (0, 3):
        sys.exit("command failed (%d): lowbit eval kld --gguf-acts q8x2 -m %s\n%s" % (p.returncode, model,
                                                                                     p.stderr[-2000:]))
    return None if p.returncode == 3 else json.loads(p.stdout)["comparison"]


def print_summary(name, llama, lowbit):
    """Per lowbit row: the best llama.cpp file no larger than its budget (lowest KLD per text, with or without
    imatrix) and lowbit's KLD over it, with the kernels' activation rounding (8-bit blocks for the GGUF types, as
    llama.cpp computes; BF16 for lowbit's weight-only kernels on the avx512bf16 tier) and with the files' own
    values on both sides (own_values)."""
    llama = [r for r in llama if r.get("preset") != "F32" and "file_bytes" in r]
    if not llama or not lowbit:
        return
    print("\n%s: lowbit at each llama.cpp file size against the best llama.cpp file no larger (ratio = lowbit KLD / "
          "llama.cpp KLD; target <= 0.6)\n" % name)
    print("| size of | budget bytes | lowbit bytes | bpw | TinyStories KLD | top-1 | WikiText KLD | top-1 | best llama.cpp "
          "file <= budget: TinyStories / WikiText KLD | ratio TinyStories / WikiText | the files' own values "
          "(--gguf-acts q8x2, FP32 activations): lowbit KLD, best llama.cpp KLD, ratio (TinyStories / WikiText) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    label = lambda r: r["preset"] + (" imatrix" if r.get("imatrix") == "yes" else "")  # noqa: E731
    multi = len({r["preset"] for r in lowbit}) > 1  # several recipes: each row names its own
    for r in lowbit:
        if any(r.get(ev) is None for ev in qa.EVAL_TEXTS):
            continue
        fit = [x for x in llama if x["file_bytes"] <= r["budget_bytes"] and all(x.get(ev) for ev in qa.EVAL_TEXTS)]
        if not fit:
            continue
        best, ratio, best2 = [], [], []
        for ev in qa.EVAL_TEXTS:
            b = min(fit, key=lambda x: x[ev]["kld"])
            best.append("%s %.5f" % (label(b), b[ev]["kld"]))
            ratio.append("%.2f" % (r[ev]["kld"] / b[ev]["kld"]))
            with2 = [x for x in fit if "kld_q8x2" in x[ev]]
            if with2 and "kld_q8x2" in r[ev]:
                b2 = min(with2, key=lambda x: x[ev]["kld_q8x2"])
                best2.append("%.5f, %s %.5f, %.2f" % (r[ev]["kld_q8x2"], label(b2), b2[ev]["kld_q8x2"],
                                                      r[ev]["kld_q8x2"] / b2[ev]["kld_q8x2"]))
        of = r["budget_of"] if isinstance(r["budget_of"], list) else [r["budget_of"]]
        of = " = ".join(dict.fromkeys(p.replace(" imatrix", "") for p in of))
        if multi:
            of += " (`%s`)" % r["preset"]
        print("| %s | %d | %d | %.3f | %.5f | %.2f %% | %.5f | %.2f %% | %s | **%s** | %s |" % (
            of, r["budget_bytes"], r["file_bytes"], r["bpw"], r["stories_eval"]["kld"],
            100 * r["stories_eval"]["top1"], r["wiki_eval"]["kld"], 100 * r["wiki_eval"]["top1"], " / ".join(best),
            " / ".join(ratio), " / ".join(best2) if best2 else "–"))
    sys.stdout.flush()


def print_row(row):
    cells = []
    for ev in qa.EVAL_TEXTS:
        m = row[ev]
        cells += ["NaN/Inf", "", ""] if m is None else ["%.3f" % m["ppl"], "%.5f" % m["kld"],
                                                        "%.2f %%" % (100 * m["top1"])]
    types = row.get("tensor_types", {})
    n = sum(types.values()) or 1
    mix = ", ".join("%s %.0f %%" % (k, 100.0 * v / n) for k, v in sorted(types.items(), key=lambda x: -x[1])
                    if v >= 0.01 * n)
    print("| %s | %s | %s | %d | %.3f | %s | %s |" % (row["engine"], row["preset"], row.get("imatrix", "–"),
                                                     row["file_bytes"], row["bpw"], " | ".join(cells), mix))
    sys.stdout.flush()


def save_row(out, row):
    key = "".join(c if c.isalnum() else "_" for c in "%s.%s.%s.%s" % (row["model"], row["engine"], row["preset"],
                                                                      row.get("imatrix", row.get("budget_bytes"))))
    with open(os.path.join(out, "rows", key + ".json"), "w") as f:
        json.dump(row, f, indent=1)


# ---- llama.cpp rows ----

def llama_rows(a, name, model, texts, calib, base, n_params, work):
    bin_ = lambda tool: os.path.join(a.llama_cpp, tool)  # noqa: E731
    f32 = os.path.join(work, name + ".f32.gguf")
    tmp = f32 + ".converted"
    if os.path.exists(tmp):
        os.remove(tmp)
    qa.run([bin_("llama-convert-llama2c-to-ggml"), "--copy-vocab-from-model", os.path.join(a.shared, VOCAB[name]),
            "--llama2c-model", model, "--llama2c-output-model", tmp])
    untie_gguf(tmp, f32, llama2c_seq_len(model))
    os.remove(tmp)
    imat = os.path.join(work, name + ".imatrix.dat")
    # The same calibration as lowbit's recipes: 32 windows of 256 tokens of the calibration half.
    qa.run([bin_("llama-imatrix"), "-m", f32, "-f", calib, "-o", imat, "-c", "256", "--chunks", "32", "-t", "2"])
    rows = [measure(a.lowbit, base, texts, f32, n_params,
                    {"model": name, "engine": "llama.cpp", "preset": "F32", "imatrix": "no", "path": f32,
                     "tensor_types": tensor_types(f32)})]
    save_row(a.out, rows[-1])
    print_row(rows[-1])
    for preset in PRESETS:
        for use_imat in (False, True):
            q = os.path.join(work, "%s.%s%s.gguf" % (name, preset, ".imat" if use_imat else ""))
            p = qa.run([bin_("llama-quantize")] + (["--imatrix", imat] if use_imat else []) + [f32, q, preset, "2"],
                       ok=(0, 1))
            if p.returncode:  # e.g. stories260K: Q8_0 / Q4_0 have no fallback for 172-column rows
                why = re.findall(r"tensor cols [^\n]*", p.stdout + p.stderr)  # the last one has no fallback
                row = {"model": name, "engine": "llama.cpp", "preset": preset, "imatrix": "yes" if use_imat else "no",
                       "refused": why[-1].split("llama_model_quantize")[0] if why else p.stderr[-300:]}
                save_row(a.out, row)
                print("| llama.cpp | %s | %s | – | – | llama-quantize refuses: %s | | | | | | |"
                      % (preset, row["imatrix"], row["refused"]))
                continue
            rows.append(measure(a.lowbit, base, texts, q, n_params,
                                {"model": name, "engine": "llama.cpp", "preset": preset,
                                 "imatrix": "yes" if use_imat else "no", "path": q,
                                 "tensor_types": tensor_types(q)}))
            save_row(a.out, rows[-1])
            print_row(rows[-1])
    return rows


def llama_perplexity_kld(a, name, model, texts, work, presets, vocab):
    """llama-perplexity's own KLD for a few files (WikiText half, ctx 256, 24 windows), next to lowbit's against
    an exact baseline (--topk = vocabulary: the table's top-32 baseline gives a lower bound of the KL)."""
    tool = os.path.join(a.llama_cpp, "llama-perplexity")
    exact = os.path.join(work, name + ".wiki_eval.exact.lbbase")
    qa.run([a.lowbit, "eval", "ppl", "-m", model, "--text", texts["wiki_eval"], "--dtype", "f32", "--save-baseline",
            exact, "--topk", str(vocab), "--ctx", "256", "--chunks", str(a.chunks), "--no-progress"])
    common = ["-f", texts["wiki_eval"], "-c", "256", "--chunks", str(a.chunks), "-t", "2", "-b", "256"]
    logits = os.path.join(work, name + ".wiki.llama_logits")
    f32 = os.path.join(work, name + ".f32.gguf")
    p = qa.run([tool, "-m", f32, "--kl-divergence-base", logits] + common)
    ppl = re.findall(r"Final estimate: PPL = ([0-9.]+)", p.stdout + p.stderr)
    result = {"f32_ppl": float(ppl[-1]) if ppl else None}
    for preset in presets:
        for suffix in ("", ".imat"):
            q = os.path.join(work, "%s.%s%s.gguf" % (name, preset, suffix))
            p = qa.run([tool, "-m", q, "--kl-divergence-base", logits, "--kl-divergence"] + common)
            log = p.stdout + p.stderr
            get = lambda pat: (lambda m: float(m.group(1)) if m else None)(re.search(pat, log))  # noqa: E731
            c = qa.compare(a.lowbit, exact, q, texts["wiki_eval"])
            result[preset + suffix] = {"llama_perplexity": {"ppl": get(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)"),
                                                            "kld": get(r"Mean\s+KLD:\s*([0-9.]+)"),
                                                            "top1_pct": get(r"Same top p:\s*([0-9.]+)")},
                                       "lowbit_exact": {"ppl": c["ppl_variant"]["ppl"], "kld": c["kld"]["mean"],
                                                        "top1": c["top1_agreement"]["value"]}}
    os.remove(exact)  # 12 bytes per vocabulary entry and token: 150 MB for kjv-brown-6M
    return result


# ---- lowbit rows: each recipe at each llama.cpp file size (lowbit quantize --budget BYTES) ----

def lowbit_rows(a, name, model, texts, calib, base, n_params, sizes):
    recipes = [r for r in a.lowbit_recipes.split(";") if r]
    if not recipes:
        print("\nlowbit rows skipped: --lowbit-recipes is empty")
        return []
    help_text = subprocess.run([a.lowbit, "quantize", "--help"], capture_output=True, text=True).stdout
    if "--budget" not in help_text:
        print("\nlowbit rows skipped: `%s quantize --help` has no --budget option" % a.lowbit)
        return []
    # One budget per distinct size: files within 1 % of a larger one (an imatrix twin: +224 bytes of metadata)
    # share its lowbit row.
    budgets = []
    for preset, size in sizes:
        if budgets and abs(budgets[-1][1] - size) <= 0.01 * budgets[-1][1]:
            budgets[-1][0].append(preset)
        else:
            budgets.append(([preset], size))
    rows = []
    for recipe in recipes:
        for preset, size in budgets:
            tag = "".join(c if c.isalnum() else "_" for c in recipe)
            ck = os.path.join(a.out, "ck", "%s.%s.%d" % (name, tag, size))
            shutil.rmtree(ck, ignore_errors=True)
            p = subprocess.run([a.lowbit, "quantize", "-m", model, "-r", recipe, "--budget", str(size), "-c", calib,
                                "--samples", "32", "--length", "256", "-o", ck, "-q"], capture_output=True, text=True)
            if p.returncode:  # e.g. a recipe whose groups do not fit the model: a row saying so, then the next
                why = (p.stderr.strip().splitlines() or ["exit code %d" % p.returncode])[0]
                save_row(a.out, {"model": name, "engine": "lowbit", "preset": recipe, "budget_bytes": size,
                                 "budget_of": preset, "failed": p.stderr[-2000:]})
                print("| lowbit | %s | – | %d | – | lowbit quantize failed: %s | | | | | | |" % (recipe, size, why))
                continue
            row = measure(a.lowbit, base, texts, ck, n_params,
                          {"model": name, "engine": "lowbit", "preset": recipe, "budget_bytes": size,
                           "budget_of": preset})
            row["within_1pct"] = abs(row["file_bytes"] - size) <= 0.01 * size
            rows.append(row)
            save_row(a.out, row)
            print_row(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lowbit", default="build/apps/lowbit/lowbit")
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--llama-cpp", help="folder with llama-quantize, llama-imatrix, llama-perplexity, "
                    "llama-convert-llama2c-to-ggml (built outside this repository)")
    ap.add_argument("--model", choices=("kjv", "stories260K", "both"), default="both")
    ap.add_argument("--out", default="out/quality_per_byte")
    ap.add_argument("--chunks", type=int, default=24, help="evaluation windows of 256 tokens per text")
    ap.add_argument("--lowbit-recipes", default="W4A16,algo=gptq;W4A16,algo=gptq,damp=0.1",
                    help="';'-separated lowbit recipes, each quantized at every size (the summary names each row's)")
    ap.add_argument("--cross-check", default="", help="','-separated presets to evaluate with llama-perplexity too")
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "rows"), exist_ok=True)
    work = os.path.join(a.out, "gguf")
    os.makedirs(work, exist_ok=True)
    texts = qa.split_texts(a.shared, a.out)
    if not a.llama_cpp:
        print("llama.cpp rows skipped: no --llama-cpp DIR (llama.cpp is built outside this repository)")
    for name in ("kjv", "stories260K") if a.model == "both" else (a.model,):
        rel, calib_key = qa.MODELS[name][:2]
        model = os.path.join(a.shared, rel)
        calib = texts[calib_key + "_calib"]
        config = json.loads(qa.run([a.lowbit, "inspect", model, "--json"]).stdout)["config"]
        n_params = config["n_params"]
        base = qa.float32_baselines(a.lowbit, model, name, texts, a.out, a.chunks)
        print("\n### %s (%d parameters; calibration: %s; float32 PPL: TinyStories %.3f, WikiText %.3f; %d x 256 "
              "tokens per text)\n" % (name, n_params, calib_key + "_calib", base["stories_eval"][1],
                                      base["wiki_eval"][1], a.chunks))
        print("| engine | preset / recipe | imatrix | file bytes | bpw | TinyStories PPL | KLD | top-1 | WikiText PPL "
              "| KLD | top-1 | tensor types (share of parameters) |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        rows = []
        if a.llama_cpp:
            rows = llama_rows(a, name, model, texts, calib, base, n_params, work)
        else:  # sizes from an earlier run under the same --out
            for f in sorted(os.listdir(os.path.join(a.out, "rows"))):
                r = json.load(open(os.path.join(a.out, "rows", f)))
                if r.get("model") == name and r.get("engine") == "llama.cpp":
                    rows.append(r)
        sizes = sorted({(r["preset"] + (" imatrix" if r.get("imatrix") == "yes" else ""), r["file_bytes"])
                        for r in rows if r["preset"] != "F32" and "file_bytes" in r}, key=lambda x: -x[1])
        mine = lowbit_rows(a, name, model, texts, calib, base, n_params, sizes)
        print_summary(name, [r for r in rows if r.get("engine") == "llama.cpp"], mine or [])
        if a.llama_cpp and a.cross_check and name == "kjv":
            x = llama_perplexity_kld(a, name, model, texts, work, a.cross_check.split(","), config["vocab_size"])
            with open(os.path.join(a.out, "rows", name + ".llama_perplexity.json"), "w") as f:
                json.dump(x, f, indent=1)
            print("\nCross-check on the WikiText half, ctx 256, %d windows, the second half of each window scored "
                  "by both (float32 PPL: llama-perplexity %s, lowbit %.4f):\n"
                  % (a.chunks, x["f32_ppl"], base["wiki_eval"][1]))
            print("| file | llama-perplexity PPL | KLD | top-1 | lowbit PPL | KLD (exact) | top-1 |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for k, v in x.items():
                if k == "f32_ppl":
                    continue
                lp, lb = v["llama_perplexity"], v["lowbit_exact"]
                print("| %s | %s | %s | %s %% | %.4f | %.6f | %.3f %% |" % (k, lp["ppl"], lp["kld"], lp["top1_pct"],
                                                                          lb["ppl"],
                                                                          lb["kld"], 100 * lb["top1"]))


if __name__ == "__main__":
    main()
