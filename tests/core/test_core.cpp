#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/hash.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "tensor/tensor.h"

using namespace lowbit;

TEST(Half, AllF16CodesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(Half, F16RoundsToNearestEvenAtMidpoints) {
  // Midpoint between 1.0 (0x3c00) and next (0x3c01) rounds to even 0x3c00; next midpoint rounds up to 0x3c02.
  float one = 1.0f, ulp = std::ldexp(1.0f, -10);
  EXPECT_EQ(f32_to_f16(one + ulp / 2), 0x3c00);
  EXPECT_EQ(f32_to_f16(one + 1.5f * ulp), 0x3c02);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // overflow to Inf
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // half of min subnormal: ties to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Hash, Sha256KnownVector) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Parallel, CoversRangeOnce) {
  std::vector<int> hit(1000, 0);
  parallel_for(1000, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hit[i]++;
  });
  for (int v : hit) EXPECT_EQ(v, 1);
}

// Guided chunks: the first is a quarter of the range for two threads, they shrink as the range drains, none
// is below n / 32 or `grain` (but the range's last), and they tile [0, n).
TEST(Parallel, GuidedChunksShrinkToAFloor) {
  const int saved = num_threads();
  set_num_threads(2);
  for (int64_t grain : {1, 40}) {
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    parallel_for(1024, grain, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      chunks.emplace_back(b, e);
    });
    std::sort(chunks.begin(), chunks.end());
    ASSERT_FALSE(chunks.empty());
    EXPECT_EQ(chunks.front(), std::make_pair(int64_t{0}, int64_t{256}));
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_EQ(chunks[i].first, i ? chunks[i - 1].second : 0);
      if (i + 1 < chunks.size()) {
        EXPECT_GE(chunks[i].second - chunks[i].first, std::max<int64_t>(32, grain));
      }
      if (i) {
        EXPECT_LE(chunks[i].second - chunks[i].first, chunks[i - 1].second - chunks[i - 1].first);
      }
    }
    EXPECT_EQ(chunks.back().second, 1024);
    EXPECT_GT(chunks.size(), 8u);  // not four fixed quarters
  }
  set_num_threads(saved);
}

// The pool under repeated use, nesting, thread-count changes, and exceptions thrown in chunks on any thread.
TEST(Parallel, PoolIsReusableNestsSeriallyAndPropagatesExceptions) {
  const int saved = num_threads();
  for (int threads : {2, 3, 1, 2}) {
    set_num_threads(threads);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hit(97);
      parallel_for(97, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          hit[i]++;
          parallel_for(3, 1, [&](int64_t, int64_t) {});  // nested: runs on this thread
        }
      });
      for (auto& v : hit) ASSERT_EQ(v.load(), 1) << threads << " threads, rep " << rep;
    }
  }
  set_num_threads(2);
  EXPECT_THROW(parallel_for(64, 1,
                            [&](int64_t b, int64_t) {
                              if (b >= 32)
                                throw Error("core", "late chunk failed");  // a later chunk: any thread
                            }),
               Error);
  std::atomic<int64_t> sum{0};  // the pool still works after the exception
  parallel_for(1000, 10, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 1000);
  set_num_threads(saved);
}

// When lowbit re-executes itself for huge pages, and with which GLIBC_TUNABLES (appended to the user's own).
TEST(Memory, HugePageTunables) {
  EXPECT_EQ(huge_page_tunables(nullptr, nullptr, "madvise"), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(huge_page_tunables(nullptr, nullptr, "always"), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(huge_page_tunables("1", "glibc.malloc.arena_max=2", "madvise"),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
  EXPECT_EQ(huge_page_tunables("0", nullptr, "madvise"), "");                       // opted out
  EXPECT_EQ(huge_page_tunables(nullptr, nullptr, "never"), "");                     // THP off
  EXPECT_EQ(huge_page_tunables(nullptr, nullptr, ""), "");                          // no THP interface
  EXPECT_EQ(huge_page_tunables(nullptr, "glibc.malloc.hugetlb=1", "madvise"), "");  // already re-executed
  EXPECT_EQ(huge_page_tunables(nullptr, "glibc.malloc.hugetlb=0", "madvise"), "");  // the user's choice
  EXPECT_THROW(huge_page_tunables("off", nullptr, "madvise"), UsageError);          // not 0 or 1
}

TEST(Error, CarriesModulePrefix) {
  try {
    fail("io", "bad thing");
  } catch (const Error& e) {
    EXPECT_EQ(e.module(), "io");
    EXPECT_STREQ(e.what(), "[io] bad thing");
  }
}

TEST(Tensor, DtypeNamesRoundTrip) {
  for (const char* n : {"F32", "F16", "BF16", "I8", "U8", "I32", "F8_E4M3", "F8_E5M2"}) {
    DType t;
    ASSERT_TRUE(dtype_from_name(n, &t));
    EXPECT_STREQ(dtype_name(t), n);
  }
  DType t;
  EXPECT_FALSE(dtype_from_name("F7", &t));
}

// Size products from flags (KV capacity x layers x width) are checked instead of wrapping.
TEST(Memory, CheckedSizeRefusesOverflowAndNegatives) {
  using lowbit::checked_size;
  EXPECT_EQ(checked_size({4, 5, 6}, "model", "x"), 120);
  EXPECT_EQ(checked_size({0, int64_t(1) << 62, int64_t(1) << 62}, "model", "x"), 0);
  EXPECT_THROW(checked_size({int64_t(1) << 31, int64_t(1) << 31, 4}, "model", "x"), lowbit::UsageError);
  EXPECT_THROW(checked_size({5, 2305843009213693952, 8, 64, 4}, "model", "KV"), lowbit::UsageError);
  EXPECT_THROW(checked_size({5, -1}, "model", "x"), lowbit::UsageError);
}
