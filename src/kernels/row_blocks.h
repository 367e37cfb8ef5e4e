// Internal to src/kernels: the load-time packers' walk over 16-row blocks (QBlkPack, KPack).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/parallel.h"

namespace lowbit::kern {

// pack(rows, nr, out + rb * region_bytes) for each 16-row block rb of a row-major matrix (rows[i]: the block's
// row i, nr <= 16 rows), in parallel over blocks of `grain`.
template <typename Pack>
void pack_row_blocks16(const uint8_t* data, int64_t row_bytes, int64_t rows, int64_t region_bytes, uint8_t* out,
                       int64_t grain, Pack&& pack) {
  parallel_for((rows + 15) / 16, grain, [&](int64_t rb0, int64_t rb1) {
    for (int64_t rb = rb0; rb < rb1; ++rb) {
      const uint8_t* rp[16];
      const int nr = static_cast<int>(std::min<int64_t>(16, rows - rb * 16));
      for (int i = 0; i < nr; ++i) rp[i] = data + (rb * 16 + i) * row_bytes;
      pack(rp, nr, out + rb * region_bytes);
    }
  });
}

}  // namespace lowbit::kern
