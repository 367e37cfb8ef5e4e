#!/usr/bin/python3
"""Independent NumPy decoder of quantized Hugging Face checkpoints, written from the published layouts and
sharing no code with lowbit:

  compressed-tensors "pack-quantized" (compressed_tensors/compressors/quantized_compressors/pack_quantized.py):
    weight_packed int32 [out, ceil(in / pf)], value k of a word at bits [k*b, (k+1)*b), offset-binary
    (q + 2^(b-1)); weight_zero_point int32 packed the same way along dim 0 (asymmetric only); weight_scale
    [out, groups]; w = (q - zp) * scale with the group of column c = c // group_size. Act-order (weights args
    "actorder": "group", compressed_tensors/quantization/lifecycle/forward.py): weight_g_idx int32 [in] names
    the group of each input column, the columns staying in their own order in weight_packed; an index holding
    -1 is unset and means column order (their dequantize checks `-1 in g_idx`).
  GPTQ (AutoGPTQ qlinear_cuda_old / GPTQModel): qweight int32 [in / pf, out] packed along the input dim, qzeros
    int32 [groups, out / pf] packed along the output dim (checkpoint_format "gptq": stored zero - 1, readers add
    1; "gptq_v2": stored as is), scales [groups, out], g_idx [in]; W^T[i, j] = scales[g, j] * (q[i, j] - z[g, j]),
    g = g_idx[i] (any g_idx: act-order checkpoints scatter each group over the inputs). 3-bit (AutoGPTQ's
    QuantLinear.pack for bits == 3): 32 values in 3 words, qweight [in * 3 / 32, out], qzeros [groups,
    out * 3 / 32]; the words of a run read as one little-endian bit string hold value k at bits [3k, 3k + 3)
    (values 10 and 21 straddle two words).
  AWQ (AutoAWQ GEMM): qweight int32 [in, out / 8] and qzeros [groups, out / 8], slot k of a word holding column
    8*j + [0, 2, 4, 6, 1, 3, 5, 7][k]; scales [groups, out]; W^T[i, j] = scales[i // gs, j] * (q - z).

Usage: dequant_checkpoint.py CHECKPOINT_DIR OUT.safetensors -- writes every quantized module's dequantized
weight as F32 [out, in] under its module name.
"""
import json
import os
import sys

import numpy as np

from safetensors_np import read_safetensors, write_safetensors


def unpack_rows(packed, bits, n):
    """int32 words -> unsigned b-bit values along the last axis (value k of a word at bits k*b)."""
    pf = 32 // bits
    w = packed.astype(np.int64) & 0xFFFFFFFF
    shifts = np.arange(pf, dtype=np.int64) * bits
    vals = (w[..., None] >> shifts) & ((1 << bits) - 1)
    return vals.reshape(*packed.shape[:-1], packed.shape[-1] * pf)[..., :n]


def unpack_bitstream(words, bits, n):
    """int32 words -> unsigned b-bit values along the last axis, the words read as one little-endian bit string
    (value k at bits [k*b, (k+1)*b)); for b = 2, 4, 8 the same as unpack_rows."""
    b = np.ascontiguousarray(words.astype("<u4")).view(np.uint8)
    bitstr = np.unpackbits(b, axis=-1, bitorder="little")  # [..., words * 32]
    m = bitstr.shape[-1] // bits
    v = bitstr[..., : m * bits].reshape(*bitstr.shape[:-1], m, bits).astype(np.int64)
    return (v << np.arange(bits, dtype=np.int64)).sum(axis=-1)[..., :n]


def ct_module(t, m, weights_args):
    bits = weights_args["num_bits"]
    rows, cols = [int(x) for x in t[m + ".weight_shape"]]
    q = unpack_rows(t[m + ".weight_packed"], bits, cols) - (1 << (bits - 1))
    scale = t[m + ".weight_scale"].astype(np.float32)
    zp = np.zeros_like(scale)
    if m + ".weight_zero_point" in t:  # packed along dim 0: transpose, unpack along the last axis, back
        z = unpack_rows(t[m + ".weight_zero_point"].T, bits, scale.shape[0]).T
        zp = (z - (1 << (bits - 1))).astype(np.float32)
    strategy = weights_args["strategy"]
    if strategy == "group":
        gs = weights_args["group_size"]
        g = np.arange(cols) // gs
        if m + ".weight_g_idx" in t:
            g_idx = t[m + ".weight_g_idx"].astype(np.int64)
            if g_idx.shape != (cols,):
                raise SystemExit(m + ".weight_g_idx has shape %s, not [%d]" % (g_idx.shape, cols))
            if not (g_idx == -1).any():
                g = g_idx
        return (q - zp[:, g]) * scale[:, g]
    if strategy == "channel":
        return (q - zp[:, :1]) * scale[:, :1]
    if strategy == "tensor":
        return (q - zp.reshape(-1)[0]) * scale.reshape(-1)[0]
    raise SystemExit("unsupported strategy " + strategy)


def gptq_module(t, m, qc):
    bits = qc["bits"]
    qweight, qzeros, scales = t[m + ".qweight"], t[m + ".qzeros"], t[m + ".scales"].astype(np.float32)
    n_in, n_out = qweight.shape[0] * 32 // bits, qweight.shape[1]
    q = unpack_bitstream(qweight.T, bits, n_in).T  # [in, out]
    z = unpack_bitstream(qzeros, bits, n_out)  # [groups, out]
    if qc.get("checkpoint_format", "gptq") == "gptq":
        z = z + 1
    g_idx = t[m + ".g_idx"] if m + ".g_idx" in t else np.arange(n_in) // qc["group_size"]
    return ((q - z[g_idx]) * scales[g_idx]).T


def awq_module(t, m, qc):
    order = [0, 2, 4, 6, 1, 3, 5, 7]
    inverse = np.argsort(order)  # slot of column offset o within a word
    qweight, qzeros, scales = t[m + ".qweight"], t[m + ".qzeros"], t[m + ".scales"].astype(np.float32)

    def unpack(words):
        v = unpack_rows(words, 4, words.shape[-1] * 8).reshape(words.shape[0], -1, 8)
        return v[:, :, inverse].reshape(words.shape[0], -1)

    q, z = unpack(qweight), unpack(qzeros)  # [in, out], [groups, out]
    g = np.arange(q.shape[0]) // qc["group_size"]
    return ((q - z[g]) * scales[g]).T


def main():
    ckpt, out = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    qc = cfg["quantization_config"]
    t = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    result = {}
    method = qc["quant_method"]
    if method == "compressed-tensors":
        groups = list(qc["config_groups"].values())
        for name in t:
            if not name.endswith(".weight_packed"):
                continue
            m = name[: -len(".weight_packed")]
            for g in groups:  # lowbit's checkpoints name their modules or target "Linear"
                if g.get("format", qc.get("format")) == "pack-quantized" and (m in g["targets"] or "Linear" in g["targets"]):
                    result[m] = ct_module(t, m, g["weights"])
                    break
    elif method in ("gptq", "awq"):
        for name in t:
            if name.endswith(".qweight"):
                m = name[: -len(".qweight")]
                result[m] = gptq_module(t, m, qc) if method == "gptq" else awq_module(t, m, qc)
    else:
        raise SystemExit("unsupported quant_method " + method)
    write_safetensors(out, result)
    print(len(result), "modules")


if __name__ == "__main__":
    main()
