#!/usr/bin/python3
"""Independent float64 reference forward pass for Llama-family Hugging Face checkpoints (numpy only).

Usage: reference_forward.py MODEL_DIR ID,ID,ID...   -> prints the logits of the last position, one per line.
Written from the Hugging Face modeling code's semantics (rotate_half RoPE, RMSNorm, SwiGLU, GQA, optional QKV bias,
q/k RMSNorm for Qwen3, llama3 rope scaling; Gemma: RMSNorm weights stored as w - 1, embeddings times
sqrt(hidden_size), GeLU (tanh approximation) in the MLP), sharing nothing with the C++ engine.
"""
import json
import math
import sys

import numpy as np

from safetensors_np import read_safetensors

def load_safetensors(path):
    return {k: v.astype(np.float64) for k, v in read_safetensors(path).items()}


def inv_freq(cfg, head_dim):
    theta = cfg.get("rope_theta", 10000.0)
    f = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wl = 2 * math.pi / f
        smooth = (old / wl - lo) / (hi - lo)
        scaled = np.where(wl > old / lo, f / factor, f)
        mid = (wl <= old / lo) & (wl >= old / hi)
        f = np.where(mid, (1 - smooth) * f / factor + smooth * f, scaled)
    elif rs and rs.get("rope_type", rs.get("type")) == "linear":
        f = f / rs["factor"]
    return f


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, f):  # x: [T, H, D], rotate_half convention
    ang = pos[:, None] * f[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos + rot * sin


def main():
    d, ids = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]
    cfg = json.load(open(d + "/config.json"))
    W = load_safetensors(d + "/model.safetensors")
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim", cfg["hidden_size"] // H)
    eps = cfg.get("rms_norm_eps", 1e-6)
    emb = W.get("model.embed_tokens.weight", W.get("lm_head.weight"))
    head = W.get("lm_head.weight", emb)
    qwen3 = cfg["model_type"] == "qwen3"
    gemma = cfg["model_type"] == "gemma"
    if gemma:  # GemmaRMSNorm computes x_hat * (1 + w)
        W = {n: (t + 1.0 if n.endswith("norm.weight") else t) for n, t in W.items()}
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    f = inv_freq(cfg, hd)
    x = emb[ids]
    if gemma:
        x = x * math.sqrt(cfg["hidden_size"])
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"], eps)
        q = h @ W[p + "self_attn.q_proj.weight"].T
        k = h @ W[p + "self_attn.k_proj.weight"].T
        v = h @ W[p + "self_attn.v_proj.weight"].T
        if p + "self_attn.q_proj.bias" in W:
            q += W[p + "self_attn.q_proj.bias"]
            k += W[p + "self_attn.k_proj.bias"]
            v += W[p + "self_attn.v_proj.bias"]
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if qwen3:
            q = rms(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, pos, f), rope(k, pos, f)
        g = H // KV
        out = np.zeros((T, H, hd))
        for hh in range(H):
            s = q[:, hh, :] @ k[:, hh // g, :].T / math.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            out[:, hh, :] = s @ v[:, hh // g, :]
        x = x + out.reshape(T, H * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        a = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        if gemma:  # gelu_pytorch_tanh
            act = 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
        else:
            act = a / (1 + np.exp(-a))
        x = x + (act * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"], eps)
    logits = x[-1] @ head.T
    sys.stdout.write("\n".join(repr(float(v)) for v in logits) + "\n")


if __name__ == "__main__":
    main()
