// JSON text for output and files. Strings that reach JSON come from users (prompts, paths, generated text,
// tokenizer pieces) and need not be valid UTF-8; nlohmann::json's default dump() throws on them — after all
// the work is done. Every serialisation goes through json_text, which writes U+FFFD for each invalid byte
// instead.
#pragma once
#include <nlohmann/json.hpp>  // complete type: json_text is inline and calls dump()
#include <string>

namespace lowbit {

// indent < 0: compact; otherwise pretty-printed with that many spaces.
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace lowbit
