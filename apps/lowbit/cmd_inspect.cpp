// `lowbit inspect`: what a checkpoint holds (formats, bits per weight, scales, unquantized layers,
// provenance).
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/lowbit/command.h"
#include "core/json_text.h"
#include "quant/inspect.h"

namespace {

struct InspectArgs {
  std::string path;
  bool json = false, per_tensor = false;
};

void setup(CLI::App& cmd) {
  static InspectArgs a;
  cmd.add_option("path", a.path,
                 "A checkpoint: quantized or plain Hugging Face directory, .safetensors, .gguf or "
                 "llama2.c .bin")
      ->required();
  cmd.add_flag("--tensors", a.per_tensor,
               "One line per tensor: shape, scheme, layout, bpw, errors, activations");
  cmd.add_flag("--json", a.json,
               "Print the whole report as JSON (every tensor, its stored tensors, provenance)");
  cmd.footer("Example: lowbit inspect /tmp/kjv-w4g32-gptq --tensors");
  cmd.callback([] {
    auto r = lowbit::quant::inspect_checkpoint(a.path);
    if (a.json) {
      std::cout << lowbit::json_text(r, 2) << "\n";
      return;
    }
    std::cout << lowbit::quant::inspect_table(r, a.per_tensor);
  });
}

}  // namespace

LOWBIT_COMMAND("inspect", 45,
               "Show what a checkpoint holds: tensors, formats, bits per weight, scales, provenance.", setup);
