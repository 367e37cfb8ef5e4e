// libFuzzer target: the Jinja chat-template interpreter of lowbit serve (serve/jinja.h). The input is a
// template's text; it is parsed and rendered with a fixed conversation (system, user, assistant, user; the
// context lowbit serve gives a model's template, plus a tools list) under small bounds, so that a runaway
// input ends in milliseconds. Only JinjaError may escape: anything else (a crash, a hang, a nlohmann or std
// exception) would take the server down on a model's template or a request.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "serve/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using lowbit::serve::JinjaError;
  using lowbit::serve::JinjaLimits;
  using lowbit::serve::JinjaTemplate;
  static const nlohmann::ordered_json ctx = {
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Hi \xc3\xa9 {{ x }}"}},
        {{"role", "assistant"}, {"content", " <think>t</think>Hello\n"}},
        {{"role", "user"}, {"content", ""}}}},
      {"tools", {{{"name", "f"}, {"parameters", {{"a", 1.5}, {"b", nullptr}}}}}},
      {"add_generation_prompt", true},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"}};
  JinjaLimits lim;
  lim.max_iterations = 20000;
  lim.max_steps = 400000;
  lim.max_output = 1 << 18;
  lim.max_allocated = 4 << 20;
  try {
    const JinjaTemplate t(std::string_view(reinterpret_cast<const char*>(data), size));
    (void)t.render(ctx, lim);
  } catch (const JinjaError&) {
  }
  return 0;
}
