#!/usr/bin/python3
"""Independent NumPy decoder of GGUF (llama.cpp) block types, written from the format definitions and sharing no
code with lowbit. Used by tests/formats/test_gguf_blocks.cpp to check lowbit's decoders bit for bit.

  iq4_xs (ggml type 23): super-blocks of 256 weights in 136 bytes: fp16 d, uint16 scales_h, uint8 scales_l[4],
    uint8 qs[128]. Sub-block s of 32 weights has the 6-bit scale ls = low 4 bits from nibble s % 2 of
    scales_l[s // 2] | high 2 bits from bits 2s..2s+1 of scales_h << 4; its codes are qs[16s:16s+16], the low
    nibbles giving elements 0..15 and the high nibbles 16..31 of the sub-block; w = d * (ls - 32) * grid[code]
    with the IQ4_NL grid below.

Usage: dequant_ggml_blocks.py TYPE IN.bin OUT.bin -- IN holds whole blocks; OUT gets the float32 values
(little-endian), in order.
"""
import sys

import numpy as np

IQ4_GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


def iq4_xs(raw):
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 136)
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)[:, 0]  # [nb]
    scales_h = blocks[:, 2:4].copy().view("<u2").astype(np.int32)[:, 0]  # [nb]
    scales_l = blocks[:, 4:8].astype(np.int32)  # [nb, 4]
    qs = blocks[:, 8:].reshape(-1, 8, 16)  # [nb, sub-block, 16]
    s = np.arange(8)
    low = (scales_l[:, s // 2] >> (4 * (s % 2))) & 0xF  # [nb, 8]
    high = (scales_h[:, None] >> (2 * s)) & 3
    ls = (low | (high << 4)) - 32
    dl = (d[:, None] * ls.astype(np.float32)).astype(np.float32)  # [nb, 8]
    codes = np.concatenate([qs & 0xF, qs >> 4], axis=2)  # [nb, 8, 32]: low nibbles, then high nibbles
    return (dl[:, :, None] * IQ4_GRID[codes]).astype(np.float32).reshape(-1)


DECODERS = {"iq4_xs": iq4_xs}

if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in DECODERS:
        sys.exit("usage: dequant_ggml_blocks.py {%s} IN.bin OUT.bin" % "|".join(sorted(DECODERS)))
    with open(sys.argv[2], "rb") as f:
        raw = f.read()
    DECODERS[sys.argv[1]](raw).astype("<f4").tofile(sys.argv[3])
