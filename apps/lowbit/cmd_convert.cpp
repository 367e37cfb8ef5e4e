// `lowbit convert`: a Hugging Face directory -> a GGUF file with llama.cpp naming.
#include <cstdio>
#include <filesystem>

#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/timer.h"
#include "io/hf_checkpoint.h"
#include "model/gguf_export.h"
#include "model/model.h"

namespace {

struct Args {
  std::string model, out, type = "f32";
};

void setup(CLI::App& cmd) {
  static Args a;
  cmd.add_option("-m,--model", a.model, "Source: Hugging Face directory or llama2.c .bin")->required();
  cmd.add_option("-o,--out", a.out, "Output .gguf file (must not exist)")->required();
  cmd.add_option("--type", a.type, "Matrix type: f32 (default), f16, bf16, q8_0, q4_0, q4_k");
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
                             "' is a quantized checkpoint (quantization_config); convert the 16/32-bit "
                             "source with --type, or hand it off with lowbit export --to "
                             "gptq|awq|compressed-tensors");
      export_gguf(config_from_hf(ck.config), ck.tensors, ck.tokenizer, o, a.out);
    } else if (fmt == "llama2c") {
      throw UsageError("convert",
                       "llama2.c checkpoints cannot be converted yet (their tokenizer.bin has no "
                       "GGUF mapping); convert a Hugging Face directory");
    } else {
      throw UsageError("convert", "'" + a.model + "' is already GGUF");
    }
    std::printf("wrote %s (%s) in %.2f s\n", a.out.c_str(), a.type.c_str(), t.seconds());
  });
}

}  // namespace

LOWBIT_COMMAND("convert", 80, "Convert a Hugging Face model directory to a GGUF file (llama.cpp naming).",
               setup);
