// `lowbit convert`: a Hugging Face directory -> a GGUF file with llama.cpp naming.
#include <cstdio>
#include <filesystem>

#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/timer.h"
#include "io/hf_checkpoint.h"
#include "model/gguf_export.h"
#include "model/gguf_model_export.h"
#include "model/model.h"

namespace {

struct Args {
  std::string model, out, type = "f32";
};

void setup(CLI::App& cmd) {
  static Args a;
  cmd.add_option("-m,--model", a.model,
                 "Source: Hugging Face directory or llama2.c .bin (tokenizer.bin beside it)")
      ->required();
  cmd.add_option("-o,--out", a.out, "Output .gguf file (must not exist)")->required();
  cmd.add_option("--type", a.type,
                 "Matrix type: f32 (default), f16, bf16 or a GGUF block type: q8_0, q4_0, q4_1, q5_0, q5_1, "
                 "q2_k .. q6_k, iq4_nl, mxfp4 (lowbit formats lists them)");
  cmd.footer("Example: lowbit convert -m ../shared/models/tinystories-656K -o /tmp/ts656k.gguf --type q8_0");
  cmd.callback([] {
    using namespace lowbit;
    if (std::filesystem::exists(a.out))
      throw UsageError("convert", "'" + a.out + "' exists; choose another --out");
    Timer t;
    std::string fmt = detect_model_format(a.model);
    GgufExportOptions o;
    o.type = a.type;
    o.name = std::filesystem::path(a.model).filename().string();
    if (fmt == "hf") {
      auto ck = io::HfCheckpoint::open(std::filesystem::is_directory(a.model)
                                           ? a.model
                                           : std::filesystem::path(a.model).parent_path().string());
      // GGUF export writes 16/32-bit sources (re-quantizing to --type); a quantized or rotated lowbit
      // checkpoint would lose its packing or its online Hadamard transform (llama.cpp runs none).
      if (ck.config.contains("lowbit_rotation"))
        throw UsageError("convert",
                         "'" + a.model +
                             "' is a rotated checkpoint (lowbit_rotation): its down_proj expects an "
                             "online Hadamard transform that llama.cpp does not run; convert the "
                             "unrotated source model instead");
      if (ck.config.contains("quantization_config"))
        throw UsageError("convert",
                         "'" + a.model +
                             "' is a quantized checkpoint (quantization_config); write it as GGUF with its "
                             "codes kept by lowbit export --to gguf, or convert the 16/32-bit source with "
                             "--type");
      export_gguf(config_from_hf(ck.config), ck.tensors, ck.tokenizer, o, a.out);
    } else if (fmt == "llama2c") {
      // The loaded model (tokenizer.bin as llama.cpp's "llama" vocabulary, rows already in the interleaved
      // RoPE order), every matrix written as --type.
      auto m = load_model(a.model);
      GgufModelExportOptions mo;
      mo.dense = a.type;
      mo.name = o.name;
      export_gguf_model(*m, mo, a.out);
    } else {
      throw UsageError("convert", "'" + a.model + "' is already GGUF");
    }
    std::printf("wrote %s (%s) in %.2f s\n", a.out.c_str(), a.type.c_str(), t.seconds());
  });
}

}  // namespace

LOWBIT_COMMAND("convert", 80, "Convert a Hugging Face or llama2.c model to a GGUF file (llama.cpp naming).",
               setup);
