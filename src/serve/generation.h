// From engine token events to response text: whole UTF-8 characters only (a character split across tokens is
// held until complete) and stop strings matched on the text (the stop text is cut, the engine request is
// cancelled). One code path serves streamed and non-streamed responses, so their texts are equal.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serve/metrics.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::serve {

class TextAssembler {
 public:
  // prompt: the request's prompt ids. When it ends in text, the first generated token continues that text, so
  // the dummy-prefix space a SentencePiece decoder drops at the start of a text is kept ("Once" -> " upon").
  TextAssembler(const Tokenizer& tok, std::vector<std::string> stop, const std::vector<int32_t>& prompt);
  // Adds a generated token; returns the text that is final now (may be empty). After a stop string matched,
  // returns "" forever and stopped() is true.
  std::string push(int32_t token);
  // The end of generation: what is still held (an incomplete character becomes U+FFFD).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::string release(bool final);
  TokenStreamDecoder dec_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded text not yet returned: it may be the start of a stop string
  bool stopped_ = false;
};

struct DriveResult {
  std::string finish_reason;  // stop | length | abort (client gone or engine shutdown) | error
  std::string error;          // on "error"
  int64_t completion_tokens = 0;
  bool client_gone = false;
};

// emit(text, event): called once per token event (event != null; text may be "") and once at the end with the
// remaining text (event == null) when it is not empty; returns false when the client is gone (the request is
// then cancelled). idle(): called when no event came for `idle_s` seconds; false = client gone. Fills `rec`
// (latencies from event timestamps) and records nothing itself.
DriveResult drive_request(Request& r, TextAssembler& text,
                          const std::function<bool(const std::string&, const TokenEvent*)>& emit,
                          const std::function<bool()>& idle, double idle_s, RequestRecord* rec);

}  // namespace lowbit::serve
