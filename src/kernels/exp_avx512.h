// Vector expf for AVX-512 code (the tiled softmax in model/, SiLU in kernels/). Header-only with internal
// linkage and a function-level target, so it is safe to include from files compiled with or without
// -mavx512f.
#pragma once
#include <immintrin.h>

#include "kernels/attn_tiled.h"

namespace lowbit::kern {
namespace {

// Cephes expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-7 polynomial, times 2^n (scalef). Relative
// error about 1e-7 on the softmax's range (x <= 0); inputs below -87.3 give ~1e-38 instead of 0.
__attribute__((target("avx512f,avx512dq"))) inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpMinInput)), _mm512_set1_ps(88.37626f));
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, fx);
}

}  // namespace
}  // namespace lowbit::kern
