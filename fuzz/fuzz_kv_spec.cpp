// libFuzzer target: the --kv-cache / --kv-k / --kv-v / --kv-evict parser (parse_kv_spec). Input layout:
//   <cache> NUL <k> NUL <v> NUL <evict>
// A spec that parses is described (describe()) and laid out for a small model, and both sides encode and
// decode a few rows through the scalar codecs, so odd group / block / scale options reach the byte layouts.
// Only lowbit::Error may escape.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "kv/kv_formats.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lowbit;
  const auto p = fuzz::split_parts(data, size, 4);
  KvCacheSpec s;
  try {
    s = parse_kv_spec(std::string(p[0]), std::string(p[1]), std::string(p[2]), std::string(p[3]));
  } catch (const Error&) {
    return 0;
  }
  (void)s.is_plain();
  (void)s.describe();
  try {
    ModelConfig c;
    c.dim = 96, c.n_layers = 2, c.n_heads = 6, c.n_kv_heads = 2, c.head_dim = 48, c.ffn_dim = 128;
    c.vocab_size = 64;
    for (int key = 0; key < 2; ++key) {
      const KvSideSpec& side = key ? s.k : s.v;
      const KvSideLayout L = kv_side_layout(side, key != 0, c);
      const int64_t D = L.kv_dim, n = std::min<int64_t>(2, std::max(1, s.block_tokens));  // n <= block
      std::vector<float> x(static_cast<size_t>(n * D));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 0.37f;
      KvLayerScales ls;
      kv_calibrate(L, side, x.data(), n, ls);
      std::vector<uint8_t> rows(static_cast<size_t>(n * L.row_bytes)),
          extra(static_cast<size_t>(L.block_extra));
      if (L.per_channel) {
        kv_encode_block(L, x.data(), n, rows.data(), L.row_bytes, extra.data());
      } else {
        for (int64_t r = 0; r < n; ++r) kv_encode_row(L, x.data() + r * D, rows.data() + r * L.row_bytes, ls);
      }
      std::vector<float> out(static_cast<size_t>(D));
      for (int64_t r = 0; r < n; ++r) {
        kv_decode_range(L, rows.data() + r * L.row_bytes, extra.data(), ls, 0, D, out.data());
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
