#include "serve/chat_template.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"

namespace lowbit::serve {

namespace fs = std::filesystem;

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::ChatML:
      return "chatml";
    case ChatFormat::Llama3:
      return "llama3";
    case ChatFormat::Llama2:
      return "llama2";
    case ChatFormat::Plain:
      return "plain";
  }
  return "plain";
}

ChatFormat chat_format_from_string(const std::string& name) {
  for (ChatFormat f : {ChatFormat::ChatML, ChatFormat::Llama3, ChatFormat::Llama2, ChatFormat::Plain})
    if (name == chat_format_name(f)) return f;
  throw UsageError("serve",
                   "--chat-template '" + name +
                       "' is not a built-in template; use chatml, llama3, llama2, plain or jinja:FILE "
                       "(example: --chat-template chatml)");
}

std::optional<ChatFormat> detect_chat_family(std::string_view jinja) {
  // Marker tokens are unambiguous: each family's template writes its own literally.
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ChatFormat::Llama3;
  if (jinja.find("<|im_start|>") != std::string_view::npos) return ChatFormat::ChatML;
  if (jinja.find("[INST]") != std::string_view::npos) return ChatFormat::Llama2;
  return std::nullopt;
}

namespace {

std::string template_from_config(const nlohmann::json& cfg) {
  if (!cfg.is_object() || !cfg.contains("chat_template")) return "";
  const auto& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  }
  return "";
}

}  // namespace

std::string read_model_chat_template(const std::string& model_path) {
  try {
    const fs::path p(model_path);
    if (fs::is_directory(p)) {
      const fs::path cfg = p / "tokenizer_config.json";
      if (!fs::exists(cfg)) return "";
      std::ifstream in(cfg);
      return template_from_config(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/true));
    }
    std::ifstream in(p, std::ios::binary);
    char magic[4] = {};
    if (!in.read(magic, 4) || std::string_view(magic, 4) != "GGUF") return "";
    const auto g = io::GgufFile::open(model_path);
    return g.has("tokenizer.chat_template") ? g.get("tokenizer.chat_template").as_string() : "";
  } catch (const std::exception&) {
    return "";  // the model loader reports real problems with the files; a template is optional
  }
}

namespace {

ChatTemplateChoice jinja_from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UsageError("serve",
                     "--chat-template jinja:" + path + ": cannot read the file; give a Jinja template file");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ChatTemplateChoice c;
  try {
    c.jinja = std::make_shared<const JinjaTemplate>(text);
  } catch (const JinjaError& e) {
    throw UsageError("serve", "--chat-template jinja:" + path + ": " + e.what() + "; fix the template");
  }
  c.reason = "--chat-template jinja:" + path + " (Jinja, interpreted by lowbit)";
  return c;
}

}  // namespace

ChatTemplateChoice choose_chat_template(const std::string& model_jinja, const std::string& flag) {
  if (flag.rfind("jinja:", 0) == 0) return jinja_from_file(flag.substr(6));
  ChatTemplateChoice c;
  const auto family = detect_chat_family(model_jinja);
  if (!flag.empty()) {
    c.format = chat_format_from_string(flag);
    c.reason = std::string("--chat-template ") + chat_format_name(c.format);
    if (!model_jinja.empty())
      c.reason += family && *family != c.format
                      ? std::string(" (overrides the model's own template, which looks like ") +
                            chat_format_name(*family) + ")"
                      : " (overrides the model's own template)";
    return c;
  }
  std::string parse_error;
  if (!model_jinja.empty()) {
    try {
      c.jinja = std::make_shared<const JinjaTemplate>(model_jinja);
      c.format = family.value_or(ChatFormat::Plain);  // unused while jinja is set; kept for reports
      c.reason = "the model's chat_template (Jinja), interpreted by lowbit";
      return c;
    } catch (const JinjaError& e) {
      parse_error = e.what();
    }
  }
  if (family) {
    c.format = *family;
    c.warn = true;
    c.reason = "the model's chat_template does not parse (" + parse_error + "); it is the " +
               chat_format_name(*family) + " family, rendered by lowbit's built-in " +
               chat_format_name(*family) + " template";
    return c;
  }
  c.format = ChatFormat::Plain;
  if (model_jinja.empty()) {
    c.reason =
        "the model has no chat_template; using plain (\"role: content\" lines, then \"assistant:\"); "
        "choose another with --chat-template chatml|llama3|llama2|jinja:FILE";
  } else {
    c.warn = true;
    c.reason =
        "the model's chat_template does not parse (" + parse_error +
        ") and is none of the families lowbit knows (ChatML, Llama-3, Llama-2/Mistral); using plain "
        "(\"role: content\" lines). Pass --chat-template chatml|llama3|llama2|jinja:FILE if one of them "
        "matches the model";
  }
  return c;
}

std::string render_chat_jinja(const JinjaTemplate& t, const std::vector<ChatMessage>& messages,
                              const std::string& bos_token, const std::string& eos_token) {
  nlohmann::ordered_json ctx = {{"messages", nlohmann::ordered_json::array()},
                                {"add_generation_prompt", true},
                                {"bos_token", bos_token},
                                {"eos_token", eos_token}};
  for (const auto& m : messages) ctx["messages"].push_back({{"role", m.role}, {"content", m.content}});
  return t.render(ctx);
}

bool jinja_prompt_needs_bos(const std::string& text, const std::string& bos_token, bool tokenizer_adds_bos) {
  if (!tokenizer_adds_bos) return false;
  return bos_token.empty() || text.compare(0, bos_token.size(), bos_token) != 0;
}

namespace {

std::string render_llama2(const std::vector<ChatMessage>& messages) {
  // <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user} [/INST]
  // The first <s> is the tokenizer's BOS; later turns write it as text (parsed as the special token).
  std::string out, system;
  bool first_user = true;
  for (const auto& m : messages) {
    if (m.role == "system" || m.role == "developer") {
      system += (system.empty() ? "" : "\n") + m.content;
    } else if (m.role == "assistant") {
      out += " " + m.content + " </s>";
    } else {  // user, tool: a user turn
      if (!first_user) out += "<s>";
      out += "[INST] ";
      if (first_user && !system.empty()) out += "<<SYS>>\n" + system + "\n<</SYS>>\n\n";
      out += m.content + " [/INST]";
      first_user = false;
    }
  }
  if (first_user)
    out += "[INST] " + (system.empty() ? "" : "<<SYS>>\n" + system + "\n<</SYS>>\n\n") + "[/INST]";
  return out;
}

}  // namespace

std::string render_chat(ChatFormat f, const std::vector<ChatMessage>& messages) {
  std::string out;
  switch (f) {
    case ChatFormat::ChatML:
      for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case ChatFormat::Llama3:
      for (const auto& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::Llama2:
      return render_llama2(messages);
    case ChatFormat::Plain:
      for (const auto& m : messages) out += m.role + ": " + m.content + "\n";
      return out + "assistant:";
  }
  return out;
}

}  // namespace lowbit::serve
