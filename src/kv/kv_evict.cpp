#include "kv/kv_evict.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace lowbit {

namespace {
int64_t parse_count(const std::string& s, const std::string& what, const std::string& all) {
  char* end = nullptr;
  if (s.empty() || s.size() > 12 || !std::isdigit(static_cast<unsigned char>(s[0])))
    throw UsageError("model", "--kv-evict '" + all + "': " + what + " '" + s + "' is not a count; e.g. " +
                                  "streaming:4+508 or h2o:25%");
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != 0 || v < 0)
    throw UsageError("model", "--kv-evict '" + all + "': " + what + " '" + s + "' is not a count; e.g. " +
                                  "streaming:4+508 or h2o:25%");
  return v;
}
}  // namespace

std::string KvEvictSpec::describe() const {
  switch (policy) {
    case KvEvictPolicy::None:
      return "none";
    case KvEvictPolicy::Streaming:
      return "streaming:" + std::to_string(sinks) + "+" + std::to_string(window);
    case KvEvictPolicy::H2O: {
      std::string b = budget_percent > 0 ? std::to_string(static_cast<int>(budget_percent)) + "%"
                                         : std::to_string(budget);
      return "h2o:" + b + (recent >= 0 ? ":recent" + std::to_string(recent) : "");
    }
  }
  return "?";
}

KvEvictSpec parse_kv_evict(const std::string& s) {
  KvEvictSpec e;
  if (s.empty() || s == "none") return e;
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon), rest = colon == std::string::npos ? "" : s.substr(colon + 1);
  if (kind == "streaming") {
    const auto plus = rest.find('+');
    if (plus == std::string::npos)
      throw UsageError("model", "--kv-evict '" + s + "': streaming needs SINKS+WINDOW, e.g. streaming:4+508");
    e.policy = KvEvictPolicy::Streaming;
    e.sinks = parse_count(rest.substr(0, plus), "sinks", s);
    e.window = parse_count(rest.substr(plus + 1), "window", s);
    if (e.window < 1)
      throw UsageError("model", "--kv-evict '" + s + "': the window must hold at least 1 token");
    return e;
  }
  if (kind == "h2o") {
    e.policy = KvEvictPolicy::H2O;
    std::string b = rest, r;
    if (auto c2 = rest.find(':'); c2 != std::string::npos) {
      b = rest.substr(0, c2);
      r = rest.substr(c2 + 1);
      if (r.rfind("recent", 0) != 0)
        throw UsageError("model", "--kv-evict '" + s + "': unknown h2o option '" + r + "'; use recentN");
      e.recent = parse_count(r.substr(6), "recent", s);
    }
    if (!b.empty() && b.back() == '%') {
      e.budget_percent = static_cast<double>(parse_count(b.substr(0, b.size() - 1), "budget", s));
      if (e.budget_percent <= 0 || e.budget_percent > 100)
        throw UsageError("model", "--kv-evict '" + s + "': the budget percentage must be in (0, 100]");
    } else {
      e.budget = parse_count(b, "budget", s);
      if (e.budget < 2)
        throw UsageError("model", "--kv-evict '" + s + "': the h2o budget must be >= 2 tokens");
    }
    return e;
  }
  throw UsageError("model", "--kv-evict '" + s + "': unknown policy '" + kind +
                                "'; use streaming:SINKS+WINDOW, h2o:BUDGET (tokens or %) or none");
}

int64_t kv_evict_budget(const KvEvictSpec& e, int64_t capacity) {
  switch (e.policy) {
    case KvEvictPolicy::None:
      return 0;
    case KvEvictPolicy::Streaming:
      return e.sinks + e.window;
    case KvEvictPolicy::H2O:
      if (e.budget_percent > 0)
        return std::max<int64_t>(2, static_cast<int64_t>(capacity * e.budget_percent / 100.0 + 0.5));
      return e.budget;
  }
  return 0;
}

int64_t kv_evict_recent(const KvEvictSpec& e, int64_t capacity) {
  const int64_t b = kv_evict_budget(e, capacity);
  if (e.policy == KvEvictPolicy::Streaming) return e.window;
  if (e.policy != KvEvictPolicy::H2O) return 0;
  return std::min(b - 1, e.recent >= 0 ? e.recent : b / 2);
}

int64_t kv_choose_victim(const KvEvictSpec& e, int64_t n, const float* scores, int64_t capacity) {
  if (n <= 1) return 0;
  if (e.policy == KvEvictPolicy::Streaming) return std::min(e.sinks, n - 1);
  // H2O: the lowest accumulated score outside the protected recent window; ties -> the oldest.
  const int64_t recent = kv_evict_recent(e, capacity);
  const int64_t end = std::max<int64_t>(1, n - recent);
  int64_t best = 0;
  for (int64_t i = 1; i < end; ++i)
    if (scores[i] < scores[best]) best = i;
  return best;
}

}  // namespace lowbit
