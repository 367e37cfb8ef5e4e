// A Jinja2 subset interpreter for the chat templates checkpoints ship (tokenizer_config.json "chat_template",
// GGUF tokenizer.chat_template), so `lowbit serve` renders a model's own template the way Hugging Face
// transformers does: Jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
// loopcontrols extension, a tojson filter that does not escape HTML, and the raise_exception / strftime_now
// globals.
//
// Supported: {{ }}, {% %}, {# #}, whitespace control (-, +), if/elif/else, for (tuple targets, `if` filter,
// else, loop.*, break/continue), set (names, tuples, namespace attributes, block set), macro and call,
// generation blocks; the filters, tests, operators, string/dict methods and literals HF templates use (the
// list is in docs/serve.md). Values are immutable as in the sandbox (namespace() attributes are the one
// mutable thing). Undefined names render as "" and are falsy; an attribute of an undefined value is an error,
// as in Jinja2.
//
// Hostile templates are bounded (JinjaLimits): nesting depth, macro recursion, loop iterations, the size of
// strings and lists built and of the output. Every failure (syntax, runtime, a limit, raise_exception) is a
// JinjaError; nothing else escapes parse or render except std::bad_alloc.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lowbit::serve {

namespace jinja {
struct Program;
}

// "[serve] chat template: <what>, at line L:C"; message() is <what> alone.
class JinjaError : public std::runtime_error {
 public:
  JinjaError(const std::string& message, int line, int col);
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  int col() const { return col_; }

 private:
  std::string message_;
  int line_, col_;
};

struct JinjaLimits {
  int max_depth = 256;                       // nested expressions/statements while rendering
  int max_macro_depth = 32;                  // macro calls inside macro calls
  int64_t max_iterations = 1'000'000;        // loop iterations of one render, all loops together
  int64_t max_steps = 50'000'000;            // expressions evaluated + elements compared/printed, in all
  size_t max_output = size_t{16} << 20;      // bytes of the rendered text, and of any one string
  size_t max_allocated = size_t{512} << 20;  // bytes of strings + 32 per list/dict element built, in all
};

// A parsed template. Parsing throws JinjaError (with the line:col of the offending token); a template nests
// at most 128 levels (blocks, brackets).
class JinjaTemplate {
 public:
  explicit JinjaTemplate(std::string_view source);
  ~JinjaTemplate();
  JinjaTemplate(JinjaTemplate&&) noexcept;
  JinjaTemplate& operator=(JinjaTemplate&&) noexcept;

  // Renders with the top-level names of `context` (an object: messages, add_generation_prompt, bos_token...)
  // plus the globals range, namespace, dict, raise_exception and strftime_now. Throws JinjaError.
  // Thread-safe: a template may render concurrently.
  std::string render(const nlohmann::ordered_json& context, const JinjaLimits& limits = {}) const;

 private:
  std::shared_ptr<const jinja::Program> prog_;
};

}  // namespace lowbit::serve
