// `lowbit fixture`: seeded random-weight models at real shapes, in exactly the real file layouts.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/timer.h"
#include "io/durable.h"
#include "io/hf_checkpoint.h"
#include "model/fixture.h"
#include "model/gguf_export.h"

namespace {

struct Args {
  std::string shape, format = "hf", out, dtype = "bf16", type = "f16", text;
  uint64_t seed = 0;
  bool list = false;
};

void setup(CLI::App& cmd) {
  static Args a;
  cmd.add_option("--shape", a.shape,
                 "Model shape: smollm2-135m, qwen2.5-0.5b, llama-3.2-1b, or tiny-* (see --list)");
  cmd.add_option("--format", a.format, "Output layout: hf (directory with safetensors) or gguf (one file)")
      ->check(CLI::IsMember({"hf", "gguf"}));
  cmd.add_option("--out", a.out, "Output directory (hf) or .gguf file (gguf); must not exist");
  cmd.add_option("--dtype", a.dtype,
                 "hf: stored dtype f32, f16 or bf16 (default bf16, as released checkpoints)");
  cmd.add_option("--type", a.type, "gguf: matrix type f32, f16, bf16, q8_0, q4_0, q4_k (default f16)");
  cmd.add_option("--seed", a.seed, "Random seed (same seed, same bytes)");
  cmd.add_option("--tokenizer-text", a.text, "Text file to learn the fixture tokenizer's BPE merges from");
  cmd.add_flag("--list", a.list, "List the available shapes");
  cmd.footer(
      "Example: lowbit fixture --shape qwen2.5-0.5b --format gguf --type q4_0 --out /tmp/qwen05-q4_0.gguf");
  cmd.callback([] {
    using namespace lowbit;
    if (a.list) {
      for (auto& s : fixture_shapes()) std::printf("%-18s %s\n", s.name.c_str(), s.description.c_str());
      return;
    }
    if (a.shape.empty() || a.out.empty())
      throw UsageError("fixture", "--shape and --out are required (or --list)");
    const FixtureShape& s = fixture_shape(a.shape);
    FixtureOptions o;
    o.seed = a.seed;
    o.dtype = a.dtype;
    if (!a.text.empty()) {
      std::error_code dir_ec;
      std::ifstream in(a.text, std::ios::binary);
      if (!in || std::filesystem::is_directory(a.text, dir_ec))
        throw UsageError("fixture", "cannot read --tokenizer-text '" + a.text + "'");
      std::stringstream ss;
      ss << in.rdbuf();
      o.tokenizer_text = ss.str();
    }
    Timer t;
    if (a.format == "hf") {
      write_fixture_hf(s, o, a.out);
      std::printf("wrote %s (%s, %s) in %.1f s\n", a.out.c_str(), s.name.c_str(), a.dtype.c_str(),
                  t.seconds());
      return;
    }
    if (std::filesystem::exists(a.out))
      throw UsageError("fixture", "'" + a.out + "' exists; choose another --out");
    // GGUF: build the HF fixture in a private scratch directory (F32), then export with llama.cpp naming.
    const std::string scratch = io::make_temp_dir_for(a.out);
    std::error_code ec;
    o.dtype = "f32";
    try {
      const std::string hf = scratch + "/hf";
      write_fixture_hf(s, o, hf);
      auto ck = io::HfCheckpoint::open(hf);
      ModelConfig c = config_from_hf(ck.config);
      GgufExportOptions go;
      go.type = a.type;
      go.name = "lowbit-fixture-" + s.name;
      export_gguf(c, ck.tensors, ck.tokenizer, go, a.out);
    } catch (...) {
      std::filesystem::remove_all(scratch, ec);
      throw;
    }
    std::filesystem::remove_all(scratch, ec);
    std::printf("wrote %s (%s, %s) in %.1f s\n", a.out.c_str(), s.name.c_str(), a.type.c_str(), t.seconds());
  });
}

}  // namespace

LOWBIT_COMMAND("fixture", 90,
               "Write a seeded random-weight model at a real shape (HF directory or GGUF file).", setup);
