#!/usr/bin/python3
"""Independent reader of one tensor of a GGUF file, written from the GGUF v3 specification and the ggml block
definitions, sharing no code with lowbit. Used by tests/quant/test_gguf_handoff.cpp to check that the blocks
`lowbit export --to gguf` writes decode, by these definitions, to the checkpoint's values.

GGUF v3 (little-endian): magic "GGUF", u32 version, u64 tensor count, u64 metadata count; metadata: string key
(u64 length + bytes), u32 value type, value (arrays: u32 element type, u64 count, elements); tensor infos: name,
u32 n_dims, u64 dims (innermost first), u32 ggml type, u64 offset into the data section; the data section starts
at the next multiple of general.alignment (default 32) after the infos.

Blocks of 32 weights (element j of a block, j < 16 in the low nibble of byte j, j + 16 in the high nibble):
  Q4_0 (type 2, 18 bytes):  f16 d, 16 bytes of nibbles q;            w = (q - 8) * d
  Q4_1 (type 3, 20 bytes):  f16 d, f16 m, 16 bytes of nibbles q;     w = q * d + m
  Q8_0 (type 8, 34 bytes):  f16 d, 32 x int8 q;                      w = q * d
  MXFP4 (type 39, 17 bytes): u8 E8M0 e, 16 bytes of E2M1 nibbles;    w = E2M1(q) * 2^(e - 127)
IQ4_XS (type 23): super-blocks of 256 weights in 136 bytes: f16 d, u16 scales_h, u8 scales_l[4], 128 bytes of
nibbles as 8 sub-blocks of 32 (the order above); sub-block s has the 6-bit scale ls = (nibble s % 2 of
scales_l[s / 2]) | (bits 2s..2s+1 of scales_h) << 4, and w = d * (ls - 32) * IQ4[q] with the non-linear grid
IQ4 = -127 -104 -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113.
F32 (type 0) and F16 (type 1) are stored as they are.

Usage: gguf_tensor.py FILE.gguf TENSOR_NAME OUT.bin -- OUT gets the float32 values, row-major [rows, cols].
"""
import struct
import sys

import numpy as np

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.d[self.p:self.p + n].decode("utf-8")
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return [self.value(et) for _ in range(n)]
        return self.take(SCALAR[t])


def nibbles(qs):  # [nb, 16] bytes -> [nb, 32] codes: low nibbles are elements 0..15, high 16..31
    return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int32)


def decode(t, raw, n):
    b = np.frombuffer(raw, dtype=np.uint8)
    if t == 0:
        return np.frombuffer(raw, dtype="<f4")[:n].copy()
    if t == 1:
        return np.frombuffer(raw, dtype="<f2")[:n].astype(np.float32)
    if t == 2:
        b = b.reshape(-1, 18)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        return ((nibbles(b[:, 2:]) - 8).astype(np.float32) * d).reshape(-1)
    if t == 3:
        b = b.reshape(-1, 20)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        m = b[:, 2:4].copy().view("<f2").astype(np.float32)
        return (nibbles(b[:, 4:]).astype(np.float32) * d + m).reshape(-1)
    if t == 8:
        b = b.reshape(-1, 34)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        return (b[:, 2:].view(np.int8).astype(np.float32) * d).reshape(-1)
    if t == 39:
        b = b.reshape(-1, 17)
        scale = np.ldexp(1.0, b[:, 0:1].astype(np.int64) - 127).astype(np.float32)
        return (E2M1[nibbles(b[:, 1:])] * scale).reshape(-1)
    if t == 23:
        b = b.reshape(-1, 136)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)  # [nsb, 1]
        sh = b[:, 2:4].copy().view("<u2").astype(np.int32)  # [nsb, 1]
        s = np.arange(8)
        ls = ((b[:, 4 + s // 2] >> (4 * (s % 2))) & 0xF).astype(np.int32) | (((sh >> (2 * s)) & 3) << 4)
        q = nibbles(b[:, 8:].reshape(-1, 16)).reshape(-1, 8, 32)  # [nsb, 8, 32]
        step = d * (ls - 32).astype(np.float32)  # [nsb, 8], float32 as the ggml decoder
        return (step[:, :, None] * IQ4[q]).reshape(-1)
    sys.exit("gguf_tensor.py: ggml type %d is not decoded here" % t)


BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 23: (256, 136), 39: (32, 17)}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    r = Reader(data)
    if r.take("<I") != 0x46554747:
        sys.exit("not a GGUF file")
    if r.take("<I") != 3:
        sys.exit("not GGUF v3")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    alignment = 32
    for _ in range(n_kv):
        key = r.string()
        v = r.value(r.take("<I"))
        if key == "general.alignment":
            alignment = v
    infos = {}
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        infos[name] = (dims, r.take("<I"), r.take("<Q"))
    base = (r.p + alignment - 1) // alignment * alignment
    dims, t, off = infos[sys.argv[2]]
    n = int(np.prod(dims))
    per, nbytes = BLOCK.get(t, (0, 0))
    if not per:
        sys.exit("gguf_tensor.py: ggml type %d is not decoded here" % t)
    raw = data[base + off: base + off + n // per * nbytes]
    decode(t, raw, n).astype("<f4").tofile(sys.argv[3])


if __name__ == "__main__":
    main()
