#!/usr/bin/python3
"""Fails when a module includes a header from a higher rung of the ladder (docs/architecture.md)."""
import os
import re
import sys

LADDER = ["core", "formats", "tensor", "kernels", "io", "model", "quant", "eval", "server"]
# kernels and io share a rung: neither may include the other.
RANK = {"core": 0, "formats": 1, "tensor": 2, "kernels": 3, "io": 3, "model": 4, "quant": 5, "eval": 6,
        "server": 7}
INC = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')

def main(src):
    bad = []
    for mod in LADDER:
        root = os.path.join(src, mod)
        if not os.path.isdir(root):
            continue
        for dp, _, files in os.walk(root):
            for f in files:
                if not f.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dp, f)
                with open(path, encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INC.match(line)
                        if not m or m.group(1) not in RANK:
                            continue
                        dep = m.group(1)
                        if dep != mod and RANK[dep] >= RANK[mod]:
                            bad.append(f"{path}:{n}: {mod} includes {dep} (same or higher rung)")
    for b in bad:
        print(b)
    print(f"{0 if bad else 1} passed, {1 if bad else 0} failed")
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
