#include "serve/generation.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace lowbit::serve {

TextAssembler::TextAssembler(const Tokenizer& tok, std::vector<std::string> stop,
                             const std::vector<int32_t>& prompt)
    : dec_(tok), stop_(std::move(stop)) {
  dec_.continue_from(prompt);
}

std::string TextAssembler::push(int32_t token) {
  if (stopped_) return "";
  held_ += dec_.push(token);
  return release(false);
}

std::string TextAssembler::finish() {
  if (stopped_) return "";
  held_ += dec_.flush();
  return release(true);
}

std::string TextAssembler::release(bool final) {
  // The earliest stop string wins; text before it is the response's last text.
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  if (final) return std::exchange(held_, std::string());
  // Hold back the longest tail that could still become a stop string. held_ is whole characters and each stop
  // string starts a character, so the cut falls on a character boundary.
  size_t keep = 0;
  for (const auto& s : stop_)
    for (size_t k = std::min(held_.size(), s.size() - 1); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

DriveResult drive_request(Request& r, TextAssembler& text,
                          const std::function<bool(const std::string&, const TokenEvent*)>& emit,
                          const std::function<bool()>& idle, double idle_s, RequestRecord* rec) {
  DriveResult res;
  double last = -1, waited = 0;
  TokenEvent e;
  auto gone = [&] {
    r.cancel();
    res.client_gone = true;
    res.finish_reason = "abort";
  };
  for (;;) {
    if (!r.next(&e, 0.25)) {
      waited += 0.25;
      if (waited >= idle_s) {
        waited = 0;
        if (!idle()) {
          gone();
          break;
        }
      }
      continue;
    }
    waited = 0;
    std::string piece;
    if (e.token >= 0) {
      ++res.completion_tokens;
      if (last < 0)
        rec->ttft = e.time - r.times().arrival;
      else
        rec->inter_token.push_back(e.time - last);
      last = e.time;
      piece = text.push(e.token);
    }
    if (e.token >= 0 && !emit(piece, &e)) {
      gone();
      break;
    }
    if (text.stopped()) {
      // A stop string matched: the engine may already be computing the next token; cancel it.
      r.cancel();
      res.finish_reason = "stop";
      break;
    }
    if (e.done) {
      res.finish_reason = e.finish_reason;
      res.error = e.error;
      break;
    }
  }
  if (res.finish_reason != "abort" && res.finish_reason != "error") {
    const std::string rest = text.finish();
    if (!rest.empty() && !emit(rest, nullptr)) {
      r.cancel();
      res.client_gone = true;
    }
  }
  const RequestTimes t = r.times();
  if (t.admitted >= 0) rec->queue = t.admitted - t.arrival;
  if (last >= 0) rec->e2e = last - t.arrival;
  rec->prompt_tokens = t.prompt_tokens;
  rec->completion_tokens = res.completion_tokens;
  rec->finish_reason = res.finish_reason;
  return res;
}

}  // namespace lowbit::serve
