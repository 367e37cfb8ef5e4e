#!/usr/bin/python3
"""The module ladder (docs/architecture.md), checked three ways; exit 1 on any violation.

1. Includes: a module never includes a header of its own rung's siblings or of a higher rung.
2. CMake link lists: src/<module>/CMakeLists.txt links only lowbit_<module> libraries of lower rungs.
   Besides, the inference modules (NO_TRAIN: engine, kv, model and everything below) never include train/ or
   torch headers nor link lowbit_train / torch, and only src/train includes torch headers at all.
3. SIMD: intrinsics, <immintrin.h> and __attribute__((target(...))) appear only in src/kernels, where every
   ISA-specific path sits behind the run-time tier (kernels/dispatch.h) and has a scalar reference.

Usage: scripts/check_ladder.py SRC_DIR
"""
import os
import re
import sys

# Rungs low to high; modules on one rung (kernels / io, eval / plan) may not use each other.
RANK = {"core": 0, "formats": 1, "tensor": 2, "kernels": 3, "io": 3, "arch": 4, "tokenizer": 4, "ops": 5,
        "kv": 6, "model": 7, "train": 8, "quant": 9, "engine": 9, "eval": 10, "plan": 10, "serve": 11}
# The train rung links libtorch; the inference path never depends on it, not even through a future rung
# change: these modules may not include a train header nor link lowbit_train or torch.
NO_TRAIN = ("engine", "kv", "model", "ops", "tokenizer", "arch", "io", "kernels", "tensor", "formats", "core")
TORCH_INC = re.compile(r'^\s*#\s*include\s+[<"](?:torch|ATen|c10)/')
INC = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
LINK = re.compile(r'target_link_libraries\s*\(\s*lowbit_([a-z_]+)([^)]*)\)', re.S)
SIMD = re.compile(r'#\s*include\s*<(?:imm|x86|[a-z]mm)intrin\.h>|__attribute__\s*\(\(\s*target|\b_mm\d*_[a-z]')


def sources(root):
    for dp, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith((".h", ".cpp")):
                yield os.path.join(dp, f)


def main(src):
    bad = []
    for mod in sorted(RANK):
        root = os.path.join(src, mod)
        if not os.path.isdir(root):
            continue
        for path in sources(root):
            with open(path, encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    m = INC.match(line)
                    if m and m.group(1) in RANK and m.group(1) != mod and RANK[m.group(1)] >= RANK[mod]:
                        bad.append(f"{path}:{n}: {mod} includes {m.group(1)} (same or higher rung)")
                    if m and m.group(1) == "train" and mod in NO_TRAIN:
                        bad.append(f"{path}:{n}: {mod} includes train (the engine must not depend on it)")
                    if mod != "train" and TORCH_INC.match(line):
                        bad.append(f"{path}:{n}: torch header outside src/train (keep libtorch in the train rung)")
                    if mod != "kernels" and SIMD.search(line):
                        bad.append(f"{path}:{n}: SIMD intrinsics outside src/kernels: move them into a kernel")
        cm = os.path.join(root, "CMakeLists.txt")
        if os.path.exists(cm):
            with open(cm, encoding="utf-8") as fh:
                for m in LINK.finditer(fh.read()):
                    if m.group(1) != mod:
                        continue
                    if mod in NO_TRAIN and re.search(r'\b(?:lowbit_train|torch)\b', m.group(2)):
                        bad.append(f"{cm}: lowbit_{mod} links lowbit_train or torch (the engine must not depend on it)")
                    for dep in re.findall(r'\blowbit_([a-z_]+)', m.group(2)):
                        if dep in RANK and dep != mod and RANK[dep] >= RANK[mod]:
                            bad.append(f"{cm}: lowbit_{mod} links lowbit_{dep} (same or higher rung)")
    for b in bad:
        print(b)
    print(f"{0 if bad else 1} passed, {1 if bad else 0} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
