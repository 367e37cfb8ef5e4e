// `lowbit export`: a quantized checkpoint re-emitted in the GPTQ, AWQ or compressed-tensors layout, codes and
// scales unchanged (quant/export.h), or any model lowbit loads as one GGUF file with each matrix in the GGUF
// type that holds its values (model/gguf_model_export.h).
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "apps/lowbit/cli_common.h"
#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/timer.h"
#include "model/gguf_model_export.h"
#include "model/model.h"
#include "quant/export.h"

namespace {

struct ExportArgs {
  std::string model, out, to, gptq_format = "v1", dense = "keep", requant;
  bool force = false, json = false, per_tensor = false;
};

void export_gguf_cli(const ExportArgs& a) {
  using namespace lowbit;
  namespace fs = std::filesystem;
  if (fs::exists(a.out) && !a.force)
    throw UsageError("export", "'" + a.out + "' exists; choose another --out or pass --force");
  if (fs::is_directory(a.out))
    throw UsageError("export", "'" + a.out + "' is a directory; --out names a .gguf file");
  Timer t;
  auto m = load_model(a.model);
  GgufModelExportOptions o;
  o.dense = a.dense;
  o.requant = a.requant;
  o.name = fs::path(a.model).filename().string();
  if (o.name.empty()) o.name = fs::path(a.model).parent_path().filename().string();
  const GgufModelExportReport r = export_gguf_model(*m, o, a.out);
  std::map<std::string, int> by_mapping;
  std::map<std::string, int64_t> by_type;
  double worst = 0;
  for (const auto& e : r.tensors) {
    ++by_mapping[e.mapping];
    by_type[e.type] += e.bytes;
    if (e.mapping == "re-quantized" || e.mapping == "quantized" || e.mapping == "min re-rounded")
      worst = std::max(worst, e.rel_rms_err);
  }
  if (a.json) {
    nlohmann::json j = {{"out", a.out},
                        {"file_bytes", r.file_bytes},
                        {"file_type", r.file_type},
                        {"appended_tokens", r.appended_tokens},
                        {"notes", r.notes},
                        {"seconds", t.seconds()}};
    for (const auto& e : r.tensors)
      j["tensors"].push_back({{"name", e.name},
                              {"source", e.source},
                              {"type", e.type},
                              {"mapping", e.mapping},
                              {"bytes", e.bytes},
                              {"changed", e.changed},
                              {"max_abs_err", e.max_abs_err},
                              {"rel_rms_err", e.rel_rms_err}});
    std::printf("%s\n", j.dump(1).c_str());
    return;
  }
  if (a.per_tensor) {
    std::printf("%-28s %-22s %-8s %-15s %10s %10s\n", "tensor", "stored as", "GGUF", "mapping", "changed",
                "rel err");
    for (const auto& e : r.tensors)
      std::printf("%-28s %-22s %-8s %-15s %10lld %10.2e\n", e.name.c_str(), e.source.c_str(), e.type.c_str(),
                  e.mapping.c_str(), static_cast<long long>(e.changed), e.rel_rms_err);
  }
  std::string maps, types;
  for (auto& [k, n] : by_mapping) maps += (maps.empty() ? "" : ", ") + std::to_string(n) + " " + k;
  for (auto& [k, n] : by_type) types += (types.empty() ? "" : ", ") + k + " " + app::human_bytes(double(n));
  std::printf("wrote %s (%s, file type %s) in %.2f s\n  tensors: %s\n  types: %s\n", a.out.c_str(),
              app::human_bytes(double(r.file_bytes)).c_str(), r.file_type.c_str(), t.seconds(), maps.c_str(),
              types.c_str());
  if (worst > 0) std::printf("  largest relative RMS change of a converted matrix: %.3e\n", worst);
  if (r.appended_tokens > 0)
    std::printf("  %lld byte tokens appended to the vocabulary (llama.cpp's SPM needs <0x00>..<0xFF>)\n",
                static_cast<long long>(r.appended_tokens));
  for (const auto& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
}

void setup(CLI::App& cmd) {
  static ExportArgs a;
  cmd.add_option(
         "-m,--model", a.model,
         "A quantized checkpoint directory (lowbit quantize output, GPTQ or AWQ); for --to gguf any model "
         "lowbit loads (also Hugging Face and llama2.c)")
      ->required();
  cmd.add_option(
         "--to", a.to,
         "Layout: gptq (AutoGPTQ/GPTQModel), awq (AutoAWQ GEMM), compressed-tensors, gguf (llama.cpp)")
      ->required()
      ->check(CLI::IsMember({"gptq", "awq", "compressed-tensors", "gguf"}));
  cmd.add_option("-o,--out", a.out,
                 "Output directory (a .gguf file for --to gguf; must not exist unless --force)")
      ->required();
  cmd.add_option(
      "--dense", a.dense,
      "gguf: 16/32-bit matrices as keep (their stored dtype, default), f32, f16, bf16 or a GGUF type "
      "(q8_0, q4_k, ...)");
  cmd.add_option("--requant", a.requant,
                 "gguf: re-quantize matrices that no GGUF type holds exactly (nf4, int3, nvfp4, fp8, ...) to "
                 "auto (the k-quant of their bits) or a GGUF type; without it they are refused");
  cmd.add_flag("--tensors", a.per_tensor,
               "gguf: print one line per tensor (stored format, GGUF type, mapping, error)");
  cmd.add_flag("--json", a.json, "gguf: print the report as JSON");
  cmd.add_option("--gptq-format", a.gptq_format,
                 "GPTQ zero points: v1 (AutoGPTQ, stored as zero - 1; default) or v2 (GPTQModel gptq_v2)");
  cmd.add_flag("--force", a.force, "Replace an existing output directory");
  cmd.footer(
      "Example: lowbit quantize -m ../shared/models/tinystories-656K --recipe int4:g32:asym -o /tmp/ts-w4 && "
      "lowbit export -m /tmp/ts-w4 --to gptq -o /tmp/ts-w4-gptq\n"
      "         lowbit quantize -m ../shared/models/kjv-brown-6M/model.bin --recipe q4_k -o /tmp/kjv-q4k && "
      "lowbit export -m /tmp/kjv-q4k --to gguf -o /tmp/kjv-q4k.gguf --tensors");
  cmd.callback([] {
    using namespace lowbit;
    if (a.to == "gguf") return export_gguf_cli(a);
    if (a.gptq_format != "v1" && a.gptq_format != "v2")
      throw UsageError("export", "--gptq-format must be v1 or v2, got '" + a.gptq_format + "'");
    Timer t;
    quant::ExportOptions o;
    o.to = a.to;
    o.gptq_v2 = a.gptq_format == "v2";
    o.force = a.force;
    auto r = quant::export_checkpoint(a.model, a.out, o);
    for (auto& w : r.warnings) std::fprintf(stderr, "note: %s\n", w.c_str());
    std::printf("wrote %s (%s, %d quantized matrices, %.1f MiB) in %.2f s\n", r.dir.c_str(), a.to.c_str(),
                r.modules, static_cast<double>(r.bytes) / (1 << 20), t.seconds());
  });
}

}  // namespace

LOWBIT_COMMAND("export", 82,
               "Re-emit a model for other engines: GPTQ, AWQ, compressed-tensors or GGUF, codes unchanged "
               "where the layout "
               "holds them.",
               setup);
