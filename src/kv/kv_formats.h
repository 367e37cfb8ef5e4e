// KV-cache formats: the user-facing spec (`--kv-cache int4:window128+rot`, `--kv-cache-k`, `--kv-cache-v`,
// `--kv-evict`), parsed once into a KvCacheSpec, and the per-layer byte layouts and scalar codecs of one
// token's K or V row. The paged cache (kv_paged.h) stores rows in these layouts; the codecs here are the
// reference the attention kernels are tested against.
//
// Formats (per side, K or V, per layer):
//   f32 | f16 | bf16          raw values
//   e4m3 | e5m2               FP8 codes, scale per tensor (default), per head (`:head`) or per token and head
//                             (`:token`, F16 scale in the row). Tensor/head scales are calibrated
//                             (`:scale=X`, or set_calibrated_scales from a checkpoint's k_scale/v_scale) or
//                             dynamic: taken from the first batch stored in the layer (amax * 16 /
//                             max_finite; larger later outliers saturate).
//   int8                      symmetric per token and head, F16 scale (s = amax/127)
//   int4 | int2               keys (KIVI): per channel over the tokens of one block (F16 scale per channel
//   per
//                             block; symmetric by default, `:asym` adds an F16 minimum), requiring a staging
//                             area of recent F16 tokens until a whole block can be quantized; `:pertoken`
//                             quantizes keys like values. Values: per token, asymmetric, groups of `group`
//                             (32) channels along the row (F16 scale + F16 minimum per group).
//   fp4                       NVFP4-style E2M1 codes, 16-element blocks along the row with an E4M3 block
//   scale;
//                             an F32 global factor per layer, from the first batch (default) or `:scale=X`.
//                             Like int4:pertoken, FP4 keys are quantized along channels, which channel
//                             outliers ruin on small models (stories260K +6.3 PPL): prefer --kv-cache-k int4
//                             there.
// Cache options: `window=N`/`windowN` (the most recent >= N tokens stay in F16, KIVI's residual), `rot`
// (Hadamard rotation of q/k and v per head), `prerope` (keys stored before RoPE; RoPE applied at attention
// time), `keep=0,-1` or `keep:0,-1` (layers kept in F16; negative = from the end), `block=16` (tokens per
// page), `budget=N` (tokens) or `budget=64MiB` (bytes of pages, shared by all sequences).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "arch/config.h"
#include "kv/kv_evict.h"

namespace lowbit {

enum class KvFormat : uint8_t { F32, F16, BF16, E4M3, E5M2, INT8, INT4, INT2, FP4 };
const char* kv_format_name(KvFormat f);
bool kv_format_is_plain(KvFormat f);  // f32/f16/bf16

enum class KvScaleMode : uint8_t { Tensor, Head, Token };  // FP8 scale granularity

struct KvSideSpec {
  KvFormat format = KvFormat::F32;
  KvScaleMode fp8_scale = KvScaleMode::Tensor;
  float fixed_scale = 0;       // FP8 tensor/head: calibrated scale (> 0), 0 = dynamic; FP4: global factor
  bool dynamic_global = true;  // FP4: global factor from the first batch (else 1, or fixed_scale)
  bool per_channel = true;     // INT4/INT2 keys: per channel over the block (values are always per token)
  bool asym_keys = false;      // INT4/INT2 per-channel keys: scale + minimum instead of symmetric
  int group = 32;              // INT4/INT2 per-token groups along the row (capped at kv_dim)
};

struct KvCacheSpec {
  KvSideSpec k, v;
  int64_t window = 0;            // full-precision (F16) window of recent tokens for quantized layers
  bool rotate = false;           // Hadamard rotation per head
  bool pre_rope = false;         // keys stored before RoPE
  std::vector<int> keep_layers;  // layers stored in F16 (negative: counted from the end)
  int block_tokens = 16;
  int64_t budget_tokens = 0;  // 0: n_seqs * capacity (rounded up to blocks)
  int64_t budget_bytes = 0;   // pages' bytes; overrides budget_tokens when > 0
  bool force_paged = false;   // `paged`: use the paged cache even for plain f32/f16/bf16
  KvEvictSpec evict;
  std::string text;  // the spec as given (for reports)

  // True when the spec is plain F32/F16/BF16 on both sides with no option (the contiguous cache serves it).
  bool is_plain() const;
  std::string describe() const;  // canonical text, e.g. "k=int4 v=int2 window=128 rot"
};

// Parses the flags once. `cache` sets both sides (and cache options); `k`/`v` override one side's format and
// options; `evict` is the --kv-evict value. Empty strings are ignored; all empty = f32. Throws UsageError
// naming the flag and the bad token.
KvCacheSpec parse_kv_spec(const std::string& cache, const std::string& k = "", const std::string& v = "",
                          const std::string& evict = "");

// ---- per-layer byte layout of one side (K or V) ----
struct KvSideLayout {
  KvFormat format = KvFormat::F32;
  KvScaleMode fp8_scale = KvScaleMode::Tensor;
  int bits = 32;
  bool per_channel = false;  // INT4/INT2 keys quantized across a block's tokens
  bool asym = false;         // per-channel keys with minimum
  int group = 0;             // per-token INT4/INT2 groups; FP4: 16
  int64_t kv_dim = 0, head_dim = 0;
  int64_t code_bytes = 0;   // packed codes of one token row
  int64_t row_bytes = 0;    // code_bytes + per-token scales
  int64_t block_extra = 0;  // per-block bytes (per-channel scales/minimums)
  bool needs_staging() const { return per_channel; }
};
KvSideLayout kv_side_layout(const KvSideSpec& s, bool is_key, const ModelConfig& c);

// Per-layer scales that are not stored per token (FP8 tensor/head scales [n_kv_heads], FP4 global factor).
struct KvLayerScales {
  std::vector<float> s;  // [n_kv_heads]; FP4: [1] global factor
  bool ready = false;
};

// Scalar codecs (the reference). encode_row writes row_bytes bytes of x [kv_dim]; decode_row_range decodes
// elements [off, off + n) of a token row into out[n]. `extra` is the block's per-channel area (per-channel
// keys), `slot` the token's index in its block, `ls` the layer scales.
void kv_encode_row(const KvSideLayout& L, const float* x, uint8_t* row, const KvLayerScales& ls);
void kv_decode_range(const KvSideLayout& L, const uint8_t* row, const uint8_t* extra, const KvLayerScales& ls,
                     int64_t off, int64_t n, float* out);
// Per-channel keys: quantizes the n rows x [n, kv_dim] (n <= block) into rows (stride row_stride) and extra.
void kv_encode_block(const KvSideLayout& L, const float* x, int64_t n, uint8_t* rows, int64_t row_stride,
                     uint8_t* extra);
// Decoding tables: FP8 (E4M3FN if e4m3, else E5M2) code -> value [256]; E2M1 code -> value [16].
const float* kv_fp8_lut(bool e4m3);
const float* kv_fp4_lut();
// Sets dynamic layer scales from rows x [n, kv_dim] when not ready (FP8 tensor/head: amax*16/max; FP4 dyn).
void kv_calibrate(const KvSideLayout& L, const KvSideSpec& s, const float* x, int64_t n, KvLayerScales& ls);

}  // namespace lowbit
