// Chat templates for /v1/chat/completions: messages -> one prompt text.
//
// Checkpoints ship their chat template as Jinja (tokenizer_config.json "chat_template", GGUF
// tokenizer.chat_template). lowbit has no Jinja interpreter: it recognises the template's family by its
// marker tokens and renders that family with a built-in renderer (ChatML, Llama-3, Llama-2/Mistral). An
// explicit
// --chat-template wins; an unrecognised template falls back to `plain` with a warning (docs/serve.md).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  ChatFormat format = ChatFormat::Plain;
  std::string reason;  // one line for the start-up report: which template and why
  bool warn = false;   // the model's template was not recognised: `plain` is a guess
};
// flag: the --chat-template value ("" when not given); model_jinja: read_model_chat_template's result.
ChatTemplateChoice choose_chat_template(const std::string& model_jinja, const std::string& flag);

// The prompt text for `messages` followed by the assistant's turn header (add_generation_prompt). BOS is not
// written: the tokenizer adds it (as Hugging Face's templates write it and then tokenize without specials);
// marker tokens (<|im_start|>, [INST], </s>...) are meant to be encoded with parse_special = true.
std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages);

}  // namespace lowbit::serve
