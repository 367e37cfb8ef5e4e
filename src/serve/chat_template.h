// Chat templates for /v1/chat/completions: messages -> one prompt text.
//
// Checkpoints ship their chat template as Jinja (tokenizer_config.json "chat_template", GGUF
// tokenizer.chat_template). lowbit interprets it (serve/jinja.h) as Hugging Face transformers does, with
// `messages`, add_generation_prompt = true and the tokenizer's bos_token / eos_token. An explicit
// --chat-template chatml|llama3|llama2|plain picks a built-in renderer instead, and --chat-template
// jinja:FILE another Jinja template. When the model's template does not parse, lowbit recognises its family
// by its marker tokens (ChatML, Llama-3, Llama-2/Mistral) and renders that family with the built-in renderer,
// else `plain`, with a warning (docs/serve.md).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/jinja.h"

namespace lowbit::serve {

enum class ChatFormat { ChatML, Llama3, Llama2, Plain };

const char* chat_format_name(ChatFormat f);  // "chatml" | "llama3" | "llama2" | "plain"
// UsageError naming the flag and the accepted names otherwise.
ChatFormat chat_format_from_string(const std::string& name);

struct ChatMessage {
  std::string role, content;
};

// The family a Jinja chat template belongs to, by its marker tokens; nullopt when none is recognised.
std::optional<ChatFormat> detect_chat_family(std::string_view jinja);

// The model's own Jinja template: tokenizer_config.json beside a Hugging Face checkpoint (a string, or the
// "default" entry of a list of named templates) or a GGUF file's tokenizer.chat_template; "" when it has
// none. Never throws on a malformed file (the server still starts; the caller reports what it chose).
std::string read_model_chat_template(const std::string& model_path);

struct ChatTemplateChoice {
  // The built-in renderer when `jinja` is null (else the template's family, for reports).
  ChatFormat format = ChatFormat::Plain;
  // The interpreted template, when there is one.
  std::shared_ptr<const JinjaTemplate> jinja;
  std::string reason;  // one line for the start-up report: which template and why
  bool warn = false;   // the model's template did not parse: the built-in renderer is a guess
  const char* name() const { return jinja ? "jinja" : chat_format_name(format); }
};
// flag: the --chat-template value ("" when not given: the model's template); model_jinja:
// read_model_chat_template's result. UsageError for an unknown flag value or a jinja:FILE that cannot be read
// or parsed.
ChatTemplateChoice choose_chat_template(const std::string& model_jinja, const std::string& flag);

// The prompt text of an interpreted template: rendered with messages (role, content), add_generation_prompt =
// true, bos_token and eos_token. JinjaError when the template fails (raise_exception, a bound, an error).
std::string render_chat_jinja(const JinjaTemplate& t, const std::vector<ChatMessage>& messages,
                              const std::string& bos_token, const std::string& eos_token);
// Whether BOS is still to be added before an interpreted template's text: only when the tokenizer adds BOS to
// prompts (tokenizer_adds_bos) and the text does not already start with the BOS token's text (most HF
// templates write {{ bos_token }} themselves; adding it again would double it).
bool jinja_prompt_needs_bos(const std::string& text, const std::string& bos_token, bool tokenizer_adds_bos);

// The prompt text for `messages` followed by the assistant's turn header (add_generation_prompt). BOS is not
// written: the tokenizer adds it (as Hugging Face's templates write it and then tokenize without specials);
// marker tokens (<|im_start|>, [INST], </s>...) are meant to be encoded with parse_special = true.
std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages);

}  // namespace lowbit::serve
