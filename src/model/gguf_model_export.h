// Writes a loaded model (any source lowbit reads: a quantized lowbit checkpoint, GPTQ / AWQ, a Hugging Face
// or llama2.c model) as one llama.cpp GGUF file, each matrix in the GGUF type that holds its stored values:
//
//   stored as                          GGUF type      mapping
//   a GGUF block (q2_k .. q6_k, q4_0,  the same       "copied": the blocks byte for byte
//   iq4_xs, ...; lowbit --budget)
//   int4 sym, groups of 32k, f16       q4_0           "exact": d = scale, nibble = code
//   int8 sym, groups of 32k, f16       q8_0           "exact": d = scale, q = code - 128
//   int4 asym, groups of 32k, f16      q4_1           d = scale, m = -zero * scale rounded to f16: "exact"
//                                                     where every m is, else "min re-rounded"
//   mxfp4 (OCP, E8M0 per 32)           mxfp4          "exact": the same E2M1 codes and E8M0 exponent
//   f32 / f16 / bf16                   the same       "dense" (or quantized to `dense` when given)
//   anything else (nf4, int3, lut*,    --requant      "re-quantized" from the dequantized values
//   nvfp4, fp8, asym int8, ...)        TYPE
//
// "exact" is not assumed: every re-packed row is decoded with ggml's rule and compared with lowbit's
// dequantized row; a mismatch demotes the matrix (and is reported with its error). For the llama architecture
// q/k rows are put in llama.cpp's interleaved RoPE order unless the model already is (llama2.c sources).
// Refused with the reason: an online Hadamard rotation (llama.cpp runs none), a GGUF source (re-quantize it
// with llama.cpp), a quantized matrix with no exact mapping and no --requant.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/scheme.h"

namespace lowbit {

struct Model;

struct GgufModelExportOptions {
  std::string dense =
      "keep";           // 16/32-bit matrices: keep (their stored dtype) | f32 | f16 | bf16 | a GGUF type
  std::string requant;  // quantized matrices without an exact GGUF type: "" refuse | auto | a GGUF type
  std::string name = "lowbit-export";
};

struct GgufTensorExport {
  std::string name;     // GGUF tensor name
  std::string source;   // lowbit format: "q4_k", "int4:g32", "f32", ...
  std::string type;     // GGUF type written
  std::string mapping;  // copied | exact | min re-rounded | widened | re-quantized | dense | quantized
  int64_t bytes = 0;
  int64_t changed = 0;     // elements whose value differs from the source model's
  double max_abs_err = 0;  // over changed elements
  double rel_rms_err = 0;  // ||written - source|| / ||source||
};

struct GgufModelExportReport {
  std::vector<GgufTensorExport> tensors;
  int64_t file_bytes = 0;
  int64_t appended_tokens = 0;  // byte tokens llama.cpp needs that the vocabulary lacked
  std::string file_type;        // the type of most matrix bytes (general.file_type)
  std::vector<std::string> notes;
};

GgufModelExportReport export_gguf_model(const Model& m, const GgufModelExportOptions& o,
                                        const std::string& path);

// The GGUF type export_gguf_model writes a [rows, cols] matrix quantized with `s` as, when its bytes are the
// stored values unchanged ("copied" GGUF blocks, or "exact": int4 / int8 sym with f16 scales in groups of
// 32k -> Q4_0 / Q8_0, OCP MXFP4 -> MXFP4); -1 when the matrix would be widened, re-rounded (int4 asym ->
// Q4_1) or re-quantized instead.
int gguf_exact_type(const QuantScheme& s, int64_t rows, int64_t cols);

// The bytes of the file export_gguf_model(m, o, ...) writes, before the matrices' types are chosen (what
// `lowbit quantize --format gguf --budget` allocates): the file is fixed_bytes plus, per matrix,
// matrix_bytes(name, its GGUF type). Exact: GGUF's header (metadata, tokenizer, one info per tensor) does not
// depend on the tensors' types, and each tensor's data is padded to the alignment.
// general.quantization_version is counted always (it is written when any matrix is quantized).
struct GgufExportSizes {
  struct Matrix {
    int64_t rows = 0, cols = 0;  // as written: byte tokens llama.cpp needs appended to the embedding / head
  };
  int64_t fixed_bytes = 0;  // header + vectors (norms, biases, RoPE factors), padded
  int64_t alignment = 32;
  std::map<std::string, Matrix> matrices;  // by lowbit name ("layers.3.w_down"); a tied lm_head is absent
  // Padded data bytes of matrix `name` in `ggml_type`; -1 for an unknown name or rows the type's block does
  // not divide.
  int64_t matrix_bytes(const std::string& name, int ggml_type) const;
};
GgufExportSizes gguf_export_sizes(const Model& m, const GgufModelExportOptions& o);

}  // namespace lowbit
