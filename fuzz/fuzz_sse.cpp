// libFuzzer target: what `lowbit bench serve` reads from a server it does not control (serve/bench_client.h):
// the server-sent-event stream, cut into pieces at input-chosen points, every event's chunk JSON, and a
// Prometheus /metrics text. Input layout:
//   <cut byte> <stream bytes> NUL <metrics text>
// Nothing may escape: a hostile or broken server must show up as a failed request, not a crash.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "serve/bench_client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lowbit::serve;
  if (size == 0) return 0;
  const size_t cut = 1 + data[0] % 17;
  const auto p = lowbit::fuzz::split_parts(data + 1, size - 1, 2);
  SseParser sse;
  int64_t text_bytes = 0;
  auto on_event = [&](std::string_view ev) {
    const ChunkInfo c = parse_chunk(ev);
    text_bytes += static_cast<int64_t>(c.text.size());
  };
  const std::string_view stream = p[0];
  for (size_t i = 0; i < stream.size(); i += cut)
    sse.feed(stream.substr(i, std::min(cut, stream.size() - i)), on_event);
  sse.finish(on_event);
  const PrometheusText m = parse_prometheus(p[1]);
  for (const auto& [name, v] : m.values) (void)m.is_counter(name);
  return text_bytes < 0;
}
