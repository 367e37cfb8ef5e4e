// What `lowbit bench serve` reads from a server: server-sent events, streamed completion chunks, Prometheus
// text, and the --url it was given.
#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serve/bench_client.h"

namespace lowbit::serve {

void SseParser::feed(std::string_view bytes, const Handler& on_event) {
  size_t i = 0;
  // A "\r\n" split across two feeds: the '\r' already ended the line, so the '\n' is not a second (blank)
  // line.
  if (after_cr_ && !bytes.empty() && bytes[0] == '\n') i = 1;
  after_cr_ = false;
  while (i < bytes.size()) {
    const size_t e = bytes.find_first_of("\r\n", i);
    if (e == std::string_view::npos) {
      partial_.append(bytes.substr(i));
      return;
    }
    std::string_view l = bytes.substr(i, e - i);
    if (!partial_.empty()) {
      partial_.append(l);
      line(partial_, on_event);
      partial_.clear();
    } else {
      line(l, on_event);
    }
    i = e + 1;
    if (bytes[e] == '\r') {
      if (i < bytes.size() && bytes[i] == '\n')
        ++i;
      else if (i == bytes.size())
        after_cr_ = true;
    }
  }
}

void SseParser::finish(const Handler& on_event) {
  if (!partial_.empty()) {
    const std::string l = std::move(partial_);
    partial_.clear();
    line(l, on_event);
  }
  dispatch(on_event);
  after_cr_ = false;
}

void SseParser::line(std::string_view l, const Handler& on_event) {
  if (l.empty()) {
    dispatch(on_event);
    return;
  }
  if (l[0] == ':') return;  // comment (keep-alive pings)
  const size_t colon = l.find(':');
  if (l.substr(0, colon) != "data") return;  // event:, id:, retry: and anything else
  std::string_view v = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
  if (!v.empty() && v[0] == ' ') v.remove_prefix(1);
  // Tolerate servers that end events with a single newline: pending data that is already a whole value is an
  // event of its own. (Within one spec-conforming event, a JSON value is never split over data: lines by the
  // servers this talks to, so this cannot cut a value in two.)
  if (has_data_ && (data_ == "[DONE]" || nlohmann::json::accept(data_))) dispatch(on_event);
  if (has_data_) data_.push_back('\n');
  data_.append(v);
  has_data_ = true;
}

void SseParser::dispatch(const Handler& on_event) {
  if (!has_data_) return;
  has_data_ = false;
  const std::string d = std::move(data_);
  data_.clear();
  on_event(d);
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

void append_string(const nlohmann::json& o, const char* key, std::string& out) {
  auto it = o.find(key);
  if (it != o.end() && it->is_string()) out += it->get_ref<const std::string&>();
}

int64_t int_field(const nlohmann::json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return -1;
  if (it->is_number_integer()) return it->get<int64_t>();
  // A server's float count: only a value an int64 holds is converted (a cast of 1e56 is undefined behaviour).
  const double d = it->get<double>();
  return d >= -9.2e18 && d <= 9.2e18 ? static_cast<int64_t>(d) : -1;
}

std::string error_text(const nlohmann::json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object() && e.contains("message") && e["message"].is_string())
    return e["message"].get<std::string>();
  return e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

ChunkInfo parse_chunk(std::string_view data) {
  ChunkInfo c;
  data = trim(data);
  if (data == "[DONE]") {
    c.done = true;
    return c;
  }
  const nlohmann::json j = nlohmann::json::parse(data.begin(), data.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    c.valid = false;
    return c;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) c.error = error_text(*e);
  if (auto ch = j.find("choices"); ch != j.end() && ch->is_array()) {
    for (const auto& choice : *ch) {
      if (!choice.is_object()) continue;
      append_string(choice, "text", c.text);  // /v1/completions
      if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
        append_string(*d, "content", c.text);  // /v1/chat/completions
        // Reasoning models stream their thinking separately (vLLM: reasoning_content, some servers:
        // reasoning); those are generated tokens all the same.
        append_string(*d, "reasoning_content", c.text);
        append_string(*d, "reasoning", c.text);
      }
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    c.has_usage = true;
    c.prompt_tokens = int_field(*u, "prompt_tokens");
    c.completion_tokens = int_field(*u, "completion_tokens");
  }
  return c;
}

bool PrometheusText::is_counter(const std::string& name) const {
  const bool suffix = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
  auto t = types.find(name);
  if (t == types.end() && suffix) t = types.find(name.substr(0, name.size() - 6));
  return t == types.end() ? suffix : t->second == "counter";
}

PrometheusText parse_prometheus(std::string_view text) {
  PrometheusText m;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view l = trim(text.substr(pos, e - pos));
    pos = e + 1;
    if (l.rfind("# TYPE ", 0) == 0) {
      const std::string_view rest = trim(l.substr(7));
      const size_t sp = rest.find_first_of(" \t");
      if (sp != std::string_view::npos)
        m.types[std::string(rest.substr(0, sp))] = std::string(trim(rest.substr(sp)));
      continue;
    }
    if (l.empty() || l[0] == '#') continue;
    size_t name_end = 0;
    while (name_end < l.size() && l[name_end] != '{' &&
           !std::isspace(static_cast<unsigned char>(l[name_end])))
      ++name_end;
    size_t v = name_end;
    if (v < l.size() && l[v] == '{') {
      // Label values may hold '}' inside quotes; find the closing brace outside them.
      bool quoted = false;
      for (; v < l.size(); ++v) {
        if (l[v] == '\\' && quoted)
          ++v;
        else if (l[v] == '"')
          quoted = !quoted;
        else if (l[v] == '}' && !quoted)
          break;
      }
      if (v >= l.size()) continue;
      ++v;
    }
    const std::string rest(trim(l.substr(v)));
    char* end = nullptr;
    const double value = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str() || name_end == 0) continue;
    m.values[std::string(l.substr(0, name_end))] += value;
  }
  return m;
}

std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t sep = url.find("://");
  const std::string scheme = sep == std::string::npos ? "" : url.substr(0, sep);
  if (scheme != "http" && scheme != "https")
    throw UsageError("bench",
                     "--url '" + url + "' must start with http:// or https:// (e.g. http://127.0.0.1:8080)");
  const size_t host_start = sep + 3;
  const size_t slash = url.find('/', host_start);
  const std::string host =
      url.substr(host_start, slash == std::string::npos ? std::string::npos : slash - host_start);
  if (host.empty() || host[0] == ':')
    throw UsageError("bench", "--url '" + url + "' names no host; pass e.g. http://127.0.0.1:8080");
  std::string prefix = slash == std::string::npos ? "" : url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {scheme + "://" + host, prefix};
}

}  // namespace lowbit::serve
