// `lowbit export`: a quantized checkpoint re-emitted in the GPTQ, AWQ or compressed-tensors layout, codes and
// scales unchanged (quant/export.h).
#include <cstdio>

#include "apps/lowbit/command.h"
#include "core/error.h"
#include "core/timer.h"
#include "quant/export.h"

namespace {

struct ExportArgs {
  std::string model, out, to, gptq_format = "v1";
  bool force = false;
};

void setup(CLI::App& cmd) {
  static ExportArgs a;
  cmd.add_option("-m,--model", a.model,
                 "A quantized checkpoint directory (lowbit quantize output, GPTQ or AWQ)")
      ->required();
  cmd.add_option("--to", a.to, "Layout: gptq (AutoGPTQ/GPTQModel), awq (AutoAWQ GEMM), compressed-tensors")
      ->required();
  cmd.add_option("-o,--out", a.out, "Output directory (must not exist unless --force)")->required();
  cmd.add_option("--gptq-format", a.gptq_format,
                 "GPTQ zero points: v1 (AutoGPTQ, stored as zero - 1; default) or v2 (GPTQModel gptq_v2)");
  cmd.add_flag("--force", a.force, "Replace an existing output directory");
  cmd.footer(
      "Example: lowbit quantize -m ../shared/models/tinystories-656K --recipe int4:g32:asym -o /tmp/ts-w4 && "
      "lowbit export -m /tmp/ts-w4 --to gptq -o /tmp/ts-w4-gptq");
  cmd.callback([] {
    using namespace lowbit;
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

LOWBIT_COMMAND(
    "export", 82,
    "Re-emit a quantized checkpoint for other engines: GPTQ, AWQ or compressed-tensors, codes unchanged.",
    setup);
