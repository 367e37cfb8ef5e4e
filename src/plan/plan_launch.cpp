// Launch lines: the command that serves a planned configuration with vLLM, SGLang or llama.cpp. Every flag is
// one those engines' argument parsers define (vLLM engine/arg_utils.py + config/cache.py, SGLang
// srt/server_args.py, llama.cpp common/arg.cpp, as read for this planner; docs/plan.md lists them); where an
// engine has no setting for a configuration the line is withheld and the note says so.
#include <cstdio>

#include "plan/plan.h"

namespace lowbit::plan {
namespace {

std::string fmt_util(double u) {
  char b[16];
  std::snprintf(b, sizeof b, "%.2f", u);
  std::string s = b;
  while (s.size() > 3 && s.back() == '0') s.pop_back();  // 0.90 -> 0.9
  return s;
}

// How an engine takes one weight configuration: flags, or the kind of checkpoint MODEL must be.
struct WeightWay {
  bool ok = false;
  std::string flags;              // " --quantization fp8"
  bool needs_checkpoint = false;  // MODEL must be a checkpoint already quantized to this scheme
  std::string note;
};

WeightWay vllm_weights(const std::string& w, const Device& d) {
  if (w == "bf16") return {true, " --dtype bfloat16", false, ""};
  if (w == "fp8-w")
    return {true, " --quantization fp8", false,
            std::string("vLLM's online FP8 quantizes the BF16 weights at load (per-tensor scales)") +
                (d.fp8 ? "; on this FP8 GPU it also quantizes activations dynamically (runs as W8A8 FP8), "
                         "weight-only FP8 is what it runs on GPUs without FP8 units (Marlin)"
                       : "; without FP8 units it runs weight-only (Marlin)")};
  if (w == "w8a8-fp8")
    return {
        true, " --quantization fp8", false,
        "vLLM's online FP8: per-tensor weight scales, dynamic activation scales; per-channel/per-token "
        "scales need an FP8-dynamic compressed-tensors checkpoint as MODEL (no --quantization flag then)"};
  if (w == "w8a8-int8" || w == "w4a16" || w == "w4a16-asym" || w == "nvfp4")
    return {
        true, "", true,
        "MODEL must be a compressed-tensors checkpoint of this scheme (llm-compressor, or `lowbit quantize`, "
        "which writes pack-quantized / nvfp4-pack-quantized); vLLM reads quantization_config from its "
        "config.json, no --quantization flag"};
  if (w == "nf4")
    return {true, " --quantization bitsandbytes", false,
            "vLLM's in-flight bitsandbytes 4-bit quantization (NF4, blocksize 64) of the BF16 checkpoint"};
  if (w == "nf4-dq")
    return {true, " --quantization bitsandbytes", true,
            "in-flight bitsandbytes has no double-quant switch: MODEL must be a bitsandbytes NF4 checkpoint "
            "saved with bnb_4bit_use_double_quant"};
  if (w == "mxfp4")
    return {
        false, "", false,
        "no vLLM flag quantizes dense linear layers to MXFP4 (its mxfp4 method serves MoE checkpoints such "
        "as gpt-oss)"};
  return {false, "", false, "the stored checkpoint's own format; see the 'stored' row"};
}

WeightWay sglang_weights(const std::string& w) {
  if (w == "bf16") return {true, " --dtype bfloat16", false, ""};
  if (w == "fp8-w" || w == "w8a8-fp8")
    return {true, " --quantization fp8", false,
            "SGLang's online FP8 quantization of the BF16 checkpoint (per-tensor weight scales)"};
  if (w == "w8a8-int8" || w == "w4a16" || w == "w4a16-asym" || w == "nvfp4")
    return {
        true, "", true,
        "MODEL must be a compressed-tensors checkpoint of this scheme; SGLang reads quantization_config from "
        "its config.json"};
  if (w == "nf4" || w == "nf4-dq")
    return {false, "", false,
            "SGLang has no in-flight NF4 quantization flag for this planner to print; serve a pre-quantized "
            "bitsandbytes checkpoint"};
  if (w == "mxfp4") return {false, "", false, "SGLang's mxfp4 quantization is MoE-only"};
  return {false, "", false, "the stored checkpoint's own format"};
}

// llama.cpp serves GGUF files: the nearest GGUF tensor type of a weight configuration.
WeightWay llamacpp_weights(const std::string& w) {
  if (w == "bf16") return {true, "BF16", false, ""};
  if (w == "w8a8-int8")
    return {
        true, "Q8_0", false,
        "GGUF Q8_0 (blocks of 32, F16 scale; 8.5 bits/weight) is llama.cpp's nearest to INT8 per-channel; "
        "activations are quantized to Q8 per block on the fly"};
  if (w == "w4a16" || w == "w4a16-asym")
    return {true, w == "w4a16" ? "Q4_0" : "Q4_1", false,
            std::string("GGUF ") + (w == "w4a16" ? "Q4_0" : "Q4_1") +
                " (blocks of 32, not 128) is llama.cpp's nearest 4-bit integer type: more scales than g128"};
  if (w == "mxfp4") return {true, "MXFP4", false, "GGUF MXFP4 (E2M1, blocks of 32 with an E8M0 scale)"};
  return {false, "", false,
          "llama.cpp has no GGUF tensor type for " + w +
              " (no FP8, NF4 or NVFP4 weights); a BF16 or Q8_0 GGUF is the nearest it serves"};
}

// KV: the engine's --kv-cache-dtype value, or "" when it has none for this configuration.
std::string vllm_kv(const std::string& kv) {
  if (kv == "bf16") return "auto";
  if (kv == "fp8") return "fp8";  // = fp8_e4m3
  return "";
}
std::string sglang_kv(const std::string& kv) {
  if (kv == "bf16") return "auto";
  if (kv == "fp8") return "fp8_e4m3";
  return "";
}
std::string llamacpp_kv(const std::string& kv) {
  if (kv == "bf16") return "bf16";
  if (kv == "int8") return "q8_0";
  if (kv == "int4") return "q4_0";
  return "";
}

}  // namespace

std::vector<LaunchLine> launch_lines(const PlanModel& m, const PlanRequest& r, int64_t ctx,
                                     const std::string& weight_id, const std::string& kv_id) {
  std::vector<LaunchLine> out;
  const int64_t tokens = ctx + r.output;  // one sequence's prompt + output
  const int64_t conc = r.concurrency;
  const std::string model = m.compare_model.empty() ? m.name : m.compare_model;
  const std::string util = fmt_util(r.gpu_memory_utilization);
  const bool multi = r.tp > 1 || r.pp > 1;
  // vLLM and SGLang load Hugging Face directories (or hub ids); other inputs need a conversion first.
  const std::string hf_note = m.source == "llama2c" || m.source == "gguf"
                                  ? "MODEL must be a Hugging Face directory: " + model + " is a " +
                                        (m.source == "gguf" ? "GGUF file" : "llama2.c checkpoint") +
                                        " (`lowbit quantize` writes a Hugging Face checkpoint of it)"
                                  : "";
  const std::string hf_model = hf_note.empty() ? model : "HF_CHECKPOINT";

  // vLLM
  {
    LaunchLine l;
    l.engine = "vllm";
    const WeightWay w = vllm_weights(weight_id, r.device);
    const std::string kv = vllm_kv(kv_id);
    if (!w.ok) l.notes.push_back(w.note);
    if (kv.empty())
      l.notes.push_back(
          "vLLM has no --kv-cache-dtype for the " + kv_config(kv_id).label +
          " KV cache (its choices are auto/bfloat16/float16 and FP8 variants; per-token-head INT8/INT4 "
          "in recent versions store different scales than this plan counts)");
    if (w.ok && !kv.empty()) {
      l.available = true;
      l.command = "vllm serve " + (w.needs_checkpoint ? std::string("QUANTIZED_CHECKPOINT") : hf_model) +
                  " --tensor-parallel-size " + std::to_string(r.tp) +
                  (r.pp > 1 ? " --pipeline-parallel-size " + std::to_string(r.pp) : std::string()) + w.flags +
                  " --kv-cache-dtype " + kv + " --max-model-len " + std::to_string(tokens) +
                  " --max-num-seqs " + std::to_string(conc) + " --gpu-memory-utilization " + util;
      if (!w.note.empty()) l.notes.push_back(w.note);
      if (!hf_note.empty()) l.notes.push_back(hf_note);
      if (kv_id == "fp8")
        l.notes.push_back(
            "FP8 KV uses the checkpoint's k_scale/v_scale when it has them, else scale 1.0: calibrate them "
            "(lowbit's kv-first recipes do) for long contexts");
    }
    out.push_back(std::move(l));
  }
  // SGLang
  {
    LaunchLine l;
    l.engine = "sglang";
    const WeightWay w = sglang_weights(weight_id);
    const std::string kv = sglang_kv(kv_id);
    if (!w.ok) l.notes.push_back(w.note);
    if (kv.empty())
      l.notes.push_back("SGLang has no --kv-cache-dtype for the " + kv_config(kv_id).label +
                        " KV cache (choices: auto, bf16, fp8_e4m3, fp8_e5m2, and FP4 variants)");
    if (w.ok && !kv.empty()) {
      l.available = true;
      l.command = "python -m sglang.launch_server --model-path " +
                  (w.needs_checkpoint ? std::string("QUANTIZED_CHECKPOINT") : hf_model) + " --tp-size " +
                  std::to_string(r.tp) + (r.pp > 1 ? " --pp-size " + std::to_string(r.pp) : std::string()) +
                  w.flags + " --kv-cache-dtype " + kv + " --context-length " + std::to_string(tokens) +
                  " --max-running-requests " + std::to_string(conc) + " --mem-fraction-static " + util;
      if (!w.note.empty()) l.notes.push_back(w.note);
      if (!hf_note.empty()) l.notes.push_back(hf_note);
      l.notes.push_back(
          "--mem-fraction-static covers weights + KV pool only (activations outside it), vLLM's "
          "--gpu-memory-utilization everything: the same number is slightly more generous in SGLang");
    }
    out.push_back(std::move(l));
  }
  // llama.cpp
  {
    LaunchLine l;
    l.engine = "llama.cpp";
    const WeightWay w = llamacpp_weights(weight_id);
    const std::string kv = llamacpp_kv(kv_id);
    if (!w.ok) l.notes.push_back(w.note);
    if (kv.empty())
      l.notes.push_back(
          "llama.cpp has no FP8 KV cache type (-ctk/-ctv: f32, f16, bf16, q8_0, q4_0, q4_1, "
          "iq4_nl, q5_0, q5_1)");
    if (w.ok && !kv.empty()) {
      l.available = true;
      std::string gguf = m.source == "gguf" && weight_id == "stored" ? m.name : "MODEL-" + w.flags + ".gguf";
      // -c is the whole KV pool, shared by --parallel slots: each gets c / parallel tokens.
      l.command = "llama-server -m " + gguf + " -c " + std::to_string(tokens * conc) + " --parallel " +
                  std::to_string(conc) + " -ctk " + kv + " -ctv " + kv +
                  (kv_id == "bf16" ? std::string() : std::string(" -fa")) + " -ngl 99" +
                  (multi ? " -sm layer" : std::string());
      if (!w.note.empty()) l.notes.push_back(w.note);
      l.notes.push_back("MODEL-" + w.flags + ".gguf: convert " + model +
                        " to GGUF (convert_hf_to_gguf.py) and " +
                        (w.flags == "BF16" ? "keep BF16" : "llama-quantize it to " + w.flags));
      if (kv_id == "int8" || kv_id == "int4")
        l.notes.push_back(std::string("llama.cpp's ") + kv +
                          " KV stores an F16 scale per 32 elements and has no " +
                          (kv_id == "int4" ? "BF16 residual window" : "static per-layer scale") +
                          "; a quantized V cache needs flash attention (-fa)");
      if (multi)
        l.notes.push_back(
            "llama.cpp splits layers (and their KV) over all visible GPUs (-sm layer), not the "
            "tensor-parallel split planned here; limit them with CUDA_VISIBLE_DEVICES");
    }
    out.push_back(std::move(l));
  }
  return out;
}

}  // namespace lowbit::plan
