// GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL / MXFP4 products on the load-time QBlkPack layout
// (kernel_plan.h), AVX-512 VNNI, decode and prefill alike.
//
// Why: the stored GGUF rows put an f16 scale before every 16 (32) code bytes, so a row-at-a-time kernel
// spends ~15 instructions per 32 weights on one 256-bit vpdpbusd plus scale handling and a horizontal sum per
// row. In the pack, one 64-byte load holds 4 (Q8_0) or 8 (4-bit, two nibbles) columns of 16 rows; with one
// broadcast 32-bit word of activations, one vpdpbusd does 64 multiply-adds for 16 outputs, no horizontal
// reduction. Per 32-column block the 16 int32 sums start from -offset * (sum of the activation codes) (exact:
// w = d * (c - offset)), are converted once and scaled by d[16 rows] * dx with one FMA. A tile of 16 rows x
// up to 8 tokens keeps its accumulators in registers, so prefill decodes each nibble vector once for 8
// tokens. The non-linear 4-bit grids (IQ4_NL, MXFP4) cost one vpshufb per 64 codes more: nibble -> grid value
// + 128, then the same unsigned x signed product with offset 128. Q4_1 / Q5_1 (w = d * c + m) have offset 0
// and one more FMA per block: m[16 rows] * (dx * sum of the activation codes), the block's activation sum.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "formats/ggml_types.h"
#include "kernels/kernel_plan.h"
#include "kernels/pack_decode_avx512.h"
#include "kernels/with_nt.h"

namespace lowbit::kern {
namespace {

inline __m512i bcast32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// rows [r, r + 16) x tokens [t0, t0 + NT); base = the row block's region. xo: per token and block, the
// integer accumulator's start -offset * sum(q) (types without a min), or sum(q) itself (Q4_1 / Q5_1).
template <int TY, int NT>
void qblk_tile(const QBlkPack& p, const uint8_t* base, int64_t nb, int64_t cols, const int8_t* q,
               const float* dx, const int32_t* xo, int64_t t0, float* y, int64_t rows, int64_t r,
               __mmask16 m) {
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.lut.data())));
  __m512 accf[NT];
  for (int j = 0; j < NT; ++j) accf[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* cb = base + p.code_off(b);
    // Several tokens per tile make it compute-bound, and the hardware prefetcher then lets the stream from
    // DRAM fall behind (the block pair's scales, after its codes, missed): software prefetch of the pair 8
    // blocks ahead (into the next row block's region at the end; it is contiguous). Qwen2.5-0.5B Q4_0, 16
    // decode sequences (lowbit throughput -c 16): +25-30 % tokens/s. A lone token (NT = 1) streams at the
    // bandwidth bound without it.
    if (NT > 1 && (b & 1) == 0) {
      const char* pf = reinterpret_cast<const char*>(base + (b + 8) * p.block_bytes);
      for (int64_t o = 0; o < 2 * p.block_bytes; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
    }
    const int8_t* xb = q + t0 * cols + 32 * b;
    __m512i acc[NT];
    constexpr bool kMin = TY == ggml::Q4_1 || TY == ggml::Q5_1;
    for (int j = 0; j < NT; ++j)
      acc[j] = kMin ? _mm512_setzero_si512() : _mm512_set1_epi32(xo[(t0 + j) * nb + b]);
    if constexpr (TY == ggml::Q8_0) {
      for (int k = 0; k < 8; ++k) {
        const __m512i w = _mm512_loadu_si512(cb + 64 * k);
        for (int j = 0; j < NT; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], w, bcast32(xb + j * cols + 4 * k));
      }
    } else {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_loadu_si512(cb + 64 * k);
        __m512i lo, hi;
        split_nibbles(v, lo, hi);
        if constexpr (TY == ggml::Q5_0 || TY == ggml::Q5_1)
          or_fifth_bits(base + p.hbit_off(b, nb) + 16 * k, lo, hi);
        if constexpr (TY == ggml::IQ4_NL || TY == ggml::MXFP4) {
          lo = _mm512_shuffle_epi8(lut, lo);
          hi = _mm512_shuffle_epi8(lut, hi);
        }
        for (int j = 0; j < NT; ++j) {
          acc[j] = _mm512_dpbusd_epi32(acc[j], lo, bcast32(xb + j * cols + 8 * k));
          acc[j] = _mm512_dpbusd_epi32(acc[j], hi, bcast32(xb + j * cols + 8 * k + 4));
        }
      }
    }
    const __m256i sh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + p.scale_off(b, nb)));
    __m512 d;
    if constexpr (TY == ggml::MXFP4)
      d = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(sh), 16));
    else
      d = _mm512_cvtph_ps(sh);
    for (int j = 0; j < NT; ++j)
      accf[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[j]),
                                _mm512_mul_ps(d, _mm512_set1_ps(dx[(t0 + j) * nb + b])), accf[j]);
    if constexpr (kMin) {
      const __m512 mn =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + p.min_off(b, nb))));
      for (int j = 0; j < NT; ++j) {
        const int64_t tb = (t0 + j) * nb + b;
        accf[j] = _mm512_fmadd_ps(mn, _mm512_set1_ps(dx[tb] * static_cast<float>(xo[tb])), accf[j]);
      }
    }
  }
  for (int j = 0; j < NT; ++j) _mm512_mask_storeu_ps(y + (t0 + j) * rows + r, m, accf[j]);
}

}  // namespace

void qblk_block_gemm_avx512(const QBlkPack& p, const uint8_t* base, int64_t r, int nr, const int8_t* q,
                            const float* dx, const int32_t* xo, int64_t T, float* y, int64_t ystride) {
  const int64_t nb = p.cols / 32;
  const auto m = static_cast<uint16_t>((1u << nr) - 1);
  for (int64_t t0 = 0; t0 < T; t0 += 8)
    with_nt(static_cast<int>(std::min<int64_t>(8, T - t0)), [&](auto n) {
      constexpr int NT = decltype(n)::value;
      switch (p.ggml_type) {
        case ggml::Q4_0:
          return qblk_tile<ggml::Q4_0, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, m);
        case ggml::Q5_0:
          return qblk_tile<ggml::Q5_0, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, m);
        case ggml::Q4_1:
          return qblk_tile<ggml::Q4_1, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, m);
        case ggml::Q5_1:
          return qblk_tile<ggml::Q5_1, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, m);
        case ggml::IQ4_NL:
          return qblk_tile<ggml::IQ4_NL, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, m);
        case ggml::MXFP4:
          return qblk_tile<ggml::MXFP4, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, m);
        default:
          return qblk_tile<ggml::Q8_0, NT>(p, base, nb, p.cols, q, dx, xo, t0, y, ystride, r, m);
      }
    });
}

void qblk_gemm_avx512(const QBlkPack& p, int64_t r0, int64_t r1, const int8_t* q, const float* dx,
                      const int32_t* xo, int64_t T, float* y) {
  const int64_t region = p.cols / 32 * p.block_bytes;
  for (int64_t r = r0; r < r1; r += 16)
    qblk_block_gemm_avx512(p, p.data.get() + (r / 16) * region, r,
                           static_cast<int>(std::min<int64_t>(16, r1 - r)), q, dx, xo, T, y, p.rows);
}

void quantize_q8_blocks_avx512(const float* x, int64_t n, int8_t* q, float* d) {
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 a = _mm512_loadu_ps(x + 32 * b), c = _mm512_loadu_ps(x + 32 * b + 16);
    // max of |x| (fmax in the scalar version: NaN inputs are not expected in activations; max_ps keeps the
    // second operand on NaN, like fmax keeps the number).
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(a, sign), _mm512_and_ps(c, sign)));
    const float db = amax / 127.0f;
    d[b] = db;
    const __m512 id = _mm512_set1_ps(db > 0 ? 1.0f / db : 0.0f);
    // Round to nearest even, as std::nearbyint in the default rounding mode.
    const __m512i qa = _mm512_cvtps_epi32(
                      _mm512_roundscale_ps(_mm512_mul_ps(a, id), _MM_FROUND_TO_NEAREST_INT)),
                  qc = _mm512_cvtps_epi32(
                      _mm512_roundscale_ps(_mm512_mul_ps(c, id), _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm512_cvtsepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm512_cvtsepi32_epi8(qc));
  }
}

}  // namespace lowbit::kern
