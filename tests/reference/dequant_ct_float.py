#!/usr/bin/python3
"""Independent NumPy decoder of compressed-tensors' floating-point layouts, written from the specifications
and sharing no code with lowbit (nor with tests/reference/dequant_checkpoint.py, which covers the integer
layouts):

  "float-quantized" (compressed_tensors FloatQuantizationCompressor: dequantize(weight, weight_scale)):
    weight F8_E4M3 / F8_E5M2 [out, in]; weight_scale [1] (strategy tensor), [out, 1] (channel),
    [out, in / group_size] (group) or [ceil(out / bh), ceil(in / bw)] (block, block_structure [bh, bw]);
    w = fp8 * scale.
  "nvfp4-pack-quantized" (NVFP4PackedCompressor): weight_packed uint8 [out, in / 2], two E2M1 codes per byte,
    the low nibble first (column 2k), code = sign bit 3 | magnitude index into [0, .5, 1, 1.5, 2, 3, 4, 6];
    weight_scale F8_E4M3 [out, in / 16]; weight_global_scale F32 [1]; w = e2m1 * (scale / global_scale)
    (compressed-tensors divides the block scale by the global scale, in float32, then multiplies).
  "mxfp4-pack-quantized" (MXFP4PackedCompressor): weight_packed as NVFP4; weight_scale uint8 E8M0
    [out, in / 32], scale = 2^(u - 127) (OCP MX v1.0; 255 is NaN); no global scale; w = e2m1 * scale.

E4M3FN / E5M2 / E8M0 are decoded from the OCP 8-bit floating point and MX specifications: E4M3FN bias 7, no
infinities, S.1111.111 NaN, subnormals m/8 * 2^-6; E5M2 bias 15, subnormals m/4 * 2^-14.

Usage: dequant_ct_float.py CHECKPOINT_DIR OUT.safetensors -- writes every module of those three layouts as F32
[out, in] under its module name (the scale multiplications done in float32, as compressed-tensors does).
"""
import json
import os
import sys

import numpy as np

from safetensors_np import read_safetensors_raw, write_safetensors

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


def e4m3fn(u):
    u = u.astype(np.int64)
    sign = np.where(u & 0x80, -1.0, 1.0)
    e, m = (u >> 3) & 0xF, u & 0x7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * 2.0 ** (e - 7.0))
    mag = np.where((u & 0x7F) == 0x7F, np.nan, mag)
    return (sign * mag).astype(np.float32)


def e5m2(u):
    u = u.astype(np.int64)
    sign = np.where(u & 0x80, -1.0, 1.0)
    e, m = (u >> 2) & 0x1F, u & 0x3
    mag = np.where(e == 0, m / 4.0 * 2.0 ** -14, (1.0 + m / 4.0) * 2.0 ** (e - 15.0))
    mag = np.where(e == 31, np.where(m == 0, np.inf, np.nan), mag)
    return (sign * mag).astype(np.float32)


def e8m0(u):
    u = u.astype(np.int64)
    return np.where(u == 255, np.nan, np.ldexp(1.0, u - 127)).astype(np.float32)


def floats(dt, a):
    if dt == "F8_E4M3":
        return e4m3fn(a)
    if dt == "F8_E5M2":
        return e5m2(a)
    if dt == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def expand(scale, rows, cols, args):
    """The scale of every element [rows, cols] from the stored grid, by the weights args' strategy."""
    strategy = args["strategy"]
    if strategy == "tensor":
        return np.full((rows, cols), scale.reshape(-1)[0], dtype=np.float32)
    if strategy == "channel":
        return np.repeat(scale.reshape(rows, 1), cols, axis=1)
    if strategy in ("group", "tensor_group"):
        g = np.arange(cols) // args["group_size"]
        return scale[:, g]
    if strategy == "block":
        bh, bw = args["block_structure"]
        return scale[np.arange(rows) // bh][:, np.arange(cols) // bw]
    raise SystemExit("unsupported strategy " + strategy)


def unpack_e2m1(packed, cols):
    lo, hi = packed & 0xF, packed >> 4
    codes = np.stack([lo, hi], axis=-1).reshape(packed.shape[0], -1)[:, :cols]
    return np.where(codes & 8, -1.0, 1.0).astype(np.float32) * E2M1[codes & 7]


def module(t, m, fmt, args):
    if fmt == "float-quantized":
        dt, w = t[m + ".weight"]
        q = floats(dt, w)
        s = floats(*t[m + ".weight_scale"])
        return q * expand(s, q.shape[0], q.shape[1], args)
    _, packed = t[m + ".weight_packed"]
    rows, cols = packed.shape[0], packed.shape[1] * 2
    q = unpack_e2m1(packed, cols)
    dt, s = t[m + ".weight_scale"]
    if fmt == "nvfp4-pack-quantized":
        assert dt == "F8_E4M3", m + ".weight_scale must be F8_E4M3"
        gs = floats(*t[m + ".weight_global_scale"]).reshape(-1)[0]
        scale = e4m3fn(s) / np.float32(gs)  # float32 division, as compressed-tensors' _dequantize
    else:
        assert dt == "U8", m + ".weight_scale must be U8 (E8M0)"
        scale = e8m0(s)
    return q * expand(scale, rows, cols, {"strategy": "group", "group_size": cols // s.shape[1]})


def main():
    ckpt, out = sys.argv[1], sys.argv[2]
    qc = json.load(open(os.path.join(ckpt, "config.json")))["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors"
    t = read_safetensors_raw(os.path.join(ckpt, "model.safetensors"))
    modules = sorted({n.rsplit(".", 1)[0] for n in t if n.endswith(".weight_scale")})
    result = {}
    for m in modules:
        for g in qc["config_groups"].values():
            fmt = g.get("format", qc.get("format"))
            if fmt in ("float-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized") and (
                    m in g["targets"] or "Linear" in g["targets"]):
                result[m] = module(t, m, fmt, g["weights"])
                break
    write_safetensors(out, result)
    print(len(result), "modules")


if __name__ == "__main__":
    main()
