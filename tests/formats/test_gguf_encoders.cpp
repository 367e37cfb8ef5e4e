// GGUF encoders against llama.cpp: golden bytes and round-trip properties.
//
// Golden bytes: the fixed rows golden_x(i) (64 values for the 32-element blocks, 256 for the k-quants) were
// encoded by llama.cpp b4748's own quantizer -- ggml_quantize_chunk(type, x, dst, 0, 1, n, imatrix), the call
// llama-quantize makes, from a scratch C++ program linked against /work/peer/llama.cpp/build/bin/
// libggml-base.so after ggml_init() (its fp16 table) -- and pasted here as data. b4748 predates ggml MXFP4,
// so kMxfp4 came from a scratch C transcription of quantize_row_mxfp4_ref in current ggml
// (ggml-org/llama.cpp ggml/src/ggml-quants.c at 01243c58). The same scratch programs compared lowbit with
// those quantizers on 8000 rows x 1024 values (normal, uniform, Student-t, one-signed, sparse, outliers,
// zero sub-blocks, magnitudes 1e-8 .. 1e4; MXFP4 20000 rows, 1e-30 .. 1e29): every byte equal for q4_0,
// q4_1, q5_0, q5_1, q8_0, q2_k .. q6_k, iq4_nl (with and without an imatrix) and ggml MXFP4. Above that
// lowbit differs only where llama.cpp's fp16 scale overflows to Inf (lowbit saturates at 65504). kIq4Xs and
// kIq4XsImatrix came from a scratch C transcription of quantize_iq4_xs / quantize_row_iq4_nl_impl (ggml/src/
// ggml-quants.c, unchanged since b4748) with F16C's fp16 rounding; the same program found lowbit's IQ4_XS
// bytes equal on 20000 rows x 1024 values (the distributions above, magnitudes 1e-8 .. 1e4, half of them
// with an importance vector).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "formats/format.h"
#include "formats/ggml_types.h"

using namespace lowbit;

namespace {
float golden_x(int i) {
  float v = static_cast<float>((i * 37 + 11) % 101 - 50) / 16.0f;
  if (i % 13 == 0) v *= 3;
  if (i % 64 >= 32) v = v * 0.25f - 1.5f;
  if (i / 16 == 3) v /= 1024;  // a sub-block of tiny values (k-quants: a scale code of 0)
  if (i / 16 == 10) v = 0;     // an all-zero sub-block
  return v;
}
float golden_imp(int i) {
  return static_cast<float>(1 + i * 7 % 5);
}

constexpr uint8_t kQ4_1[40] = {0xb3, 0x3b, 0x50, 0xc7, 0xb0, 0x77, 0x9a, 0x56, 0x78, 0xab,
                               0x56, 0x89, 0xa5, 0x67, 0xa9, 0x45, 0x78, 0x9f, 0x56, 0x78,
                               0xc4, 0x30, 0x78, 0xc0, 0xf8, 0xf2, 0xf6, 0xfa, 0xf3, 0xf7,
                               0xf0, 0xf2, 0xf8, 0xf1, 0xf5, 0xf9, 0xf2, 0xf6, 0xfa, 0xf3};
constexpr uint8_t kQ5_0[44] = {0x50, 0x37, 0xb6, 0xb4, 0xa5, 0xa5, 0x70, 0xe0, 0x35, 0xac, 0xf1,
                               0x46, 0xbd, 0x12, 0x6a, 0xdf, 0x64, 0x9b, 0xe0, 0x3f, 0xbc, 0x02,
                               0x78, 0x30, 0x00, 0x00, 0xff, 0xff, 0x09, 0x02, 0x06, 0x0a, 0x03,
                               0x07, 0x00, 0x02, 0x08, 0x01, 0x05, 0x09, 0x02, 0x06, 0x0b, 0x03};
constexpr uint8_t kQ5_1[48] = {0x74, 0x37, 0x50, 0xc7, 0xb4, 0xb4, 0xa5, 0x25, 0x60, 0xef, 0x34, 0xac,
                               0xf1, 0x46, 0xbd, 0x02, 0x5a, 0xde, 0x53, 0x9b, 0xe0, 0x3f, 0xac, 0xf1,
                               0x9d, 0x2c, 0x78, 0xc0, 0x09, 0x49, 0xff, 0xff, 0xf2, 0xf4, 0xfc, 0xf4,
                               0xf6, 0xfe, 0xf0, 0xf4, 0xf0, 0xf2, 0xfa, 0xf2, 0xf4, 0xfc, 0xf4, 0xf7};
constexpr uint8_t kIq4Nl[36] = {0xab, 0x2b, 0xc0, 0x68, 0xab, 0x45, 0x79, 0xbc, 0x56, 0x89, 0xb4, 0x67,
                                0xba, 0x45, 0x78, 0xaf, 0x56, 0x89, 0x84, 0x24, 0x84, 0x81, 0x82, 0x84,
                                0x81, 0x83, 0x80, 0x81, 0x83, 0x80, 0x82, 0x84, 0x81, 0x82, 0x84, 0x81};
constexpr uint8_t kIq4NlImatrix[36] = {0x5d, 0xab, 0x4f, 0x98, 0x65, 0xcb, 0x87, 0x54, 0xba,
                                       0x86, 0x4c, 0xa9, 0x45, 0xcb, 0x98, 0x60, 0xba, 0x87,
                                       0x89, 0x24, 0x84, 0x81, 0x82, 0x84, 0x81, 0x83, 0x80,
                                       0x81, 0x83, 0x80, 0x82, 0x84, 0x81, 0x82, 0x84, 0x81};
constexpr uint8_t kMxfp4[34] = {0x7f, 0x5f, 0xa0, 0x34, 0xdc, 0x91, 0x45, 0xca, 0x02, 0x5d, 0xb9, 0x53,
                                0xdc, 0xa0, 0x37, 0xcb, 0x01, 0x7e, 0x0c, 0x0e, 0x0d, 0x0b, 0x0e, 0x0c,
                                0x0e, 0x0e, 0x0c, 0x0e, 0x0d, 0x0c, 0x0e, 0x0d, 0x0b, 0x0e};
constexpr uint8_t kQ2_K[84] = {
    0xee, 0x55, 0x41, 0x00, 0x5f, 0x45, 0x52, 0x42, 0x57, 0x87, 0x00, 0x41, 0x65, 0xfa, 0x42, 0x41, 0x5c,
    0xa2, 0x4a, 0x5d, 0x86, 0x4e, 0x91, 0x82, 0x1d, 0x91, 0xca, 0x5d, 0x96, 0x4b, 0x5d, 0x86, 0x1f, 0x65,
    0x8a, 0x1c, 0x71, 0xcb, 0x6c, 0x76, 0x1b, 0x6d, 0x8b, 0x1c, 0x65, 0x8a, 0x1c, 0x75, 0x20, 0x71, 0x93,
    0x20, 0x71, 0x12, 0x60, 0x41, 0x12, 0x71, 0xc2, 0x20, 0x71, 0x92, 0x20, 0x71, 0x1b, 0x7d, 0xd6, 0x2f,
    0xb1, 0xe6, 0x6d, 0xf2, 0xeb, 0x7d, 0xf6, 0x2b, 0x7c, 0xc6, 0x2f, 0xb1, 0x7b, 0x35, 0x3d, 0x38};
constexpr uint8_t kQ3_K[110] = {
    0x54, 0x51, 0x05, 0x54, 0x55, 0x05, 0x51, 0x15, 0x04, 0x51, 0x85, 0x54, 0x51, 0x05, 0x50, 0x55,
    0x15, 0x40, 0x15, 0x54, 0x41, 0x1d, 0x60, 0x51, 0x15, 0x40, 0x55, 0x54, 0x40, 0x15, 0x54, 0x41,
    0x49, 0x80, 0x55, 0x8b, 0x94, 0x49, 0xb0, 0xd0, 0x0b, 0xb0, 0xd5, 0x4b, 0xb0, 0x57, 0xaf, 0x94,
    0x1b, 0x67, 0xba, 0x0d, 0x50, 0x6a, 0x7e, 0x84, 0x1b, 0x6e, 0xbb, 0x18, 0x57, 0xba, 0x0d, 0x94,
    0x03, 0x61, 0xa0, 0x12, 0xb0, 0x22, 0x52, 0x80, 0x32, 0x61, 0x13, 0x03, 0x71, 0xa3, 0x52, 0xb0,
    0x26, 0x5e, 0xb5, 0x0b, 0x53, 0xb5, 0x01, 0x90, 0xf6, 0x4a, 0x90, 0x0a, 0x5c, 0x85, 0x0b, 0x53,
    0xf0, 0x25, 0x09, 0x90, 0x5b, 0x5a, 0x97, 0x99, 0x6c, 0x19, 0x65, 0x56, 0xd0, 0xac};
constexpr uint8_t kQ4_K[144] = {
    0x1b, 0x24, 0x15, 0x30, 0xbf, 0x09, 0xad, 0x0f, 0xb9, 0x52, 0xd6, 0x56, 0x37, 0x19, 0xfd, 0x2a,
    0x90, 0x27, 0x69, 0xa5, 0x38, 0x7a, 0x06, 0x28, 0x84, 0x27, 0x69, 0xa5, 0x37, 0x7e, 0xb6, 0x48,
    0xfa, 0xf6, 0xf8, 0xf5, 0xf7, 0xf9, 0xf5, 0xf7, 0xfa, 0xf6, 0xfa, 0xf4, 0xf6, 0xf9, 0xf5, 0xf7,
    0x44, 0x6f, 0x22, 0x55, 0x70, 0x33, 0x56, 0x81, 0x04, 0x67, 0x81, 0x45, 0x78, 0x22, 0x59, 0x70,
    0x33, 0x56, 0x81, 0x44, 0x67, 0xf2, 0x45, 0x78, 0x33, 0x56, 0x70, 0x33, 0x67, 0x81, 0x44, 0x68,
    0xf2, 0xf6, 0xfe, 0xf3, 0xf7, 0xfb, 0xf4, 0xf8, 0xfc, 0xf5, 0xf9, 0xf2, 0xf6, 0xfa, 0xf3, 0xf7,
    0x6b, 0xa4, 0x38, 0x7c, 0x05, 0x49, 0xe3, 0x16, 0x5a, 0x94, 0x27, 0x6b, 0xa0, 0x38, 0x7c, 0x06,
    0x2b, 0x5e, 0x98, 0x3c, 0x6f, 0x09, 0x4c, 0x77, 0x1a, 0x5d, 0xf8, 0x2b, 0x6e, 0x99, 0x3c, 0x7f,
    0x06, 0x4d, 0x87, 0x1a, 0x5e, 0x98, 0x2b, 0x8e, 0xa9, 0x3c, 0x7f, 0x1a, 0x4d, 0x80, 0x2b, 0x5e};
constexpr uint8_t kQ5_K[176] = {
    0x8e, 0x1f, 0x1e, 0x30, 0xbf, 0x0a, 0xf1, 0x10, 0xb8, 0x51, 0xd7, 0x56, 0x37, 0x1a, 0xf0, 0x2a,
    0x62, 0x64, 0xf1, 0x62, 0x61, 0x71, 0x60, 0xb9, 0x70, 0x60, 0xf9, 0x62, 0x65, 0xf1, 0x66, 0x71,
    0x13, 0x62, 0x9b, 0x52, 0x42, 0xdb, 0x62, 0xc7, 0xd3, 0x62, 0x53, 0x52, 0x62, 0x9b, 0x52, 0x42,
    0x10, 0x3f, 0xb4, 0x3c, 0x51, 0xd6, 0x0d, 0x32, 0xf9, 0x1e, 0x93, 0x1b, 0x40, 0xbf, 0x3c, 0x61,
    0xe6, 0xed, 0xe2, 0xea, 0xef, 0xe4, 0xeb, 0xe0, 0xe5, 0xec, 0xe5, 0xe9, 0xee, 0xe3, 0xea, 0xef,
    0x89, 0xde, 0x55, 0xab, 0xf0, 0x66, 0xbd, 0x02, 0x08, 0xce, 0x13, 0x9a, 0xe0, 0x55, 0xa2, 0xf0,
    0x77, 0xbd, 0x02, 0x89, 0xdf, 0xe4, 0x9a, 0xe1, 0x66, 0xac, 0xf1, 0x76, 0xce, 0x13, 0x89, 0xdf,
    0xe5, 0xed, 0xef, 0xe7, 0xef, 0xe7, 0xe9, 0xe1, 0xe9, 0xeb, 0xe3, 0xe5, 0xed, 0xe6, 0xe8, 0xe0,
    0xb8, 0x3a, 0x62, 0xda, 0x0c, 0x84, 0xc6, 0x2e, 0xa6, 0x28, 0x40, 0xc8, 0x40, 0x62, 0xeb, 0x0d,
    0x46, 0xcd, 0x41, 0x6a, 0xee, 0x03, 0x8a, 0x0e, 0x35, 0xab, 0xf0, 0x57, 0xdd, 0x42, 0x78, 0xff,
    0x1d, 0x9a, 0x1f, 0x35, 0xbc, 0x31, 0x57, 0x1e, 0x52, 0x79, 0xff, 0x24, 0xab, 0x10, 0x46, 0xcc};
constexpr uint8_t kQ6_K[210] = {
    0xf1, 0x0f, 0x59, 0xc8, 0xc2, 0x3c, 0xab, 0x95, 0x04, 0x7e, 0x77, 0xe6, 0x50, 0x4e, 0x29, 0xb3, 0x5e,
    0xd6, 0x7d, 0xf5, 0x7c, 0x03, 0x8b, 0x02, 0xaa, 0x22, 0xba, 0xa1, 0xb8, 0x5f, 0xd7, 0x5e, 0xc2, 0x24,
    0x8c, 0xe5, 0x46, 0x9f, 0xf0, 0x64, 0x11, 0x13, 0x7b, 0xd3, 0x35, 0x8d, 0xe5, 0x57, 0x14, 0xaa, 0x20,
    0x46, 0xc1, 0xb1, 0x67, 0xfd, 0x03, 0x89, 0x1f, 0x25, 0xba, 0x30, 0x46, 0xdc, 0xd6, 0x56, 0xb0, 0xa2,
    0xb1, 0x21, 0xad, 0x0d, 0x8c, 0x09, 0x78, 0xf5, 0x74, 0xd4, 0x51, 0xd0, 0x21, 0x44, 0x54, 0xe5, 0x78,
    0x79, 0x0c, 0x9d, 0xad, 0x31, 0xc1, 0xc2, 0x50, 0x06, 0xf6, 0x8a, 0x40, 0xc0, 0x40, 0x60, 0xe0, 0x00,
    0x80, 0x00, 0x20, 0xa0, 0x10, 0x40, 0xc0, 0x50, 0x60, 0xf0, 0x0d, 0x95, 0x17, 0x3f, 0xb1, 0x39, 0x5e,
    0x13, 0x5b, 0x73, 0xf5, 0x1d, 0x96, 0x18, 0x30, 0xc2, 0x14, 0x41, 0x22, 0x15, 0x62, 0x22, 0x11, 0x62,
    0x25, 0x51, 0x62, 0x15, 0x52, 0x23, 0x15, 0x62, 0x27, 0x01, 0x76, 0x14, 0x01, 0xb7, 0x14, 0x02, 0x27,
    0x15, 0x73, 0x24, 0x01, 0x76, 0x14, 0x01, 0x13, 0x32, 0x40, 0x23, 0x32, 0x11, 0x22, 0x41, 0x10, 0x32,
    0x81, 0x13, 0x32, 0x41, 0x23, 0x32, 0x13, 0x25, 0x52, 0x13, 0x21, 0x52, 0x24, 0x61, 0x52, 0x25, 0x22,
    0x13, 0x24, 0x42, 0x17, 0x21, 0x78, 0x33, 0x24, 0x00, 0x80, 0xcf, 0x2f, 0x22, 0xb9, 0x47, 0x00, 0x24,
    0x31, 0x7f, 0x24, 0x24, 0x09, 0x18};

constexpr uint8_t kIq4Xs[136] = {
    0x14, 0x18, 0x8b, 0xb8, 0x9e, 0xb0, 0x8e, 0x8f, 0xc0, 0x68, 0xab, 0x45, 0x79, 0xbc, 0x56, 0x89, 0xb4,
    0x67, 0xba, 0x45, 0x78, 0xaf, 0x56, 0x89, 0x84, 0x81, 0x82, 0x84, 0x81, 0x83, 0x80, 0x81, 0x83, 0x80,
    0x82, 0x84, 0x81, 0x82, 0x84, 0x81, 0x97, 0x60, 0xba, 0x87, 0x5c, 0xa9, 0x76, 0x4b, 0x98, 0x65, 0xba,
    0x97, 0x54, 0xa9, 0x74, 0x5b, 0x12, 0x33, 0x51, 0x22, 0x34, 0xb1, 0x23, 0x44, 0x10, 0x33, 0x45, 0x22,
    0x34, 0x51, 0x22, 0x34, 0x3e, 0xca, 0x60, 0x2d, 0xa8, 0x53, 0xdc, 0x97, 0x42, 0xcb, 0x75, 0x3e, 0xf9,
    0x64, 0x2d, 0xa8, 0x28, 0x48, 0x18, 0x28, 0x08, 0x18, 0x78, 0x08, 0x28, 0x48, 0x08, 0x28, 0x48, 0x18,
    0x38, 0x08, 0x37, 0x9b, 0x45, 0x79, 0xab, 0x56, 0x89, 0xb4, 0x67, 0x9a, 0xc5, 0x68, 0xab, 0x05, 0x79,
    0xac, 0x00, 0x12, 0x34, 0x00, 0x12, 0x30, 0x01, 0x33, 0x40, 0x11, 0x28, 0x00, 0x12, 0x34, 0x01, 0x22};
constexpr uint8_t kIq4XsImatrix[136] = {
    0x1b, 0x98, 0x77, 0x44, 0x7d, 0x5e, 0x8e, 0x80, 0x4f, 0x98, 0x65, 0xca, 0x87, 0x54, 0xba, 0x86, 0x4c,
    0xa9, 0x45, 0xcb, 0x98, 0x60, 0xba, 0x87, 0x84, 0x81, 0x82, 0x84, 0x81, 0x83, 0x80, 0x81, 0x83, 0x81,
    0x82, 0x84, 0x81, 0x82, 0x84, 0x81, 0x97, 0x50, 0xba, 0x86, 0x5c, 0xa9, 0x76, 0x4b, 0x98, 0x65, 0xba,
    0x97, 0x54, 0xb9, 0x73, 0x4c, 0x12, 0x33, 0x51, 0x22, 0x34, 0xb1, 0x23, 0x44, 0x10, 0x33, 0x45, 0x22,
    0x34, 0x51, 0x22, 0x34, 0xd2, 0x46, 0x9f, 0xe3, 0x57, 0xbc, 0x24, 0x79, 0xcd, 0x35, 0x8a, 0xd2, 0x06,
    0xac, 0xe3, 0x68, 0x28, 0x48, 0x18, 0x28, 0x08, 0x18, 0x78, 0x08, 0x28, 0x48, 0x08, 0x28, 0x48, 0x18,
    0x38, 0x08, 0x47, 0x9a, 0x45, 0x79, 0xab, 0x56, 0x89, 0xb4, 0x67, 0x9a, 0xc5, 0x78, 0xab, 0x06, 0x79,
    0xab, 0x00, 0x12, 0x34, 0x00, 0x12, 0x30, 0x01, 0x33, 0x40, 0x11, 0x28, 0x00, 0x12, 0x34, 0x01, 0x22};

std::vector<uint8_t> encode(int type, const std::vector<float>& x, const float* imp = nullptr,
                            std::vector<float>* values = nullptr) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> b(static_cast<size_t>(ggml_row_bytes(*ggml_type_info(type), n)), 0xA5);
  if (values) values->assign(x.size(), NAN);
  quantize_row_ggml(type, x.data(), b.data(), n, imp, values ? values->data() : nullptr);
  return b;
}
std::vector<float> decode(int type, const std::vector<uint8_t>& b, size_t n) {
  std::vector<float> y(n);
  dequantize_row_ggml(type, b.data(), y.data(), static_cast<int64_t>(n));
  return y;
}
void expect_bytes(int type, const std::vector<uint8_t>& got, const uint8_t* want, size_t n,
                  const std::string& what) {
  ASSERT_EQ(got.size(), n) << what;
  int bad = 0;
  for (size_t i = 0; i < n && bad < 4; ++i)
    if (got[i] != want[i]) {
      ADD_FAILURE() << ggml_type_info(type)->name << " " << what << ": byte " << i << " is 0x" << std::hex
                    << int(got[i]) << ", llama.cpp wrote 0x" << int(want[i]);
      ++bad;
    }
}
std::vector<float> golden_row(int n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = golden_x(i);
  return x;
}

constexpr int kNewTypes[] = {ggml::Q4_1, ggml::Q5_0, ggml::Q5_1, ggml::IQ4_NL, ggml::MXFP4};

std::vector<float> normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (auto& v : x) v = scale * nd(rng);
  return x;
}
}  // namespace

TEST(GgufEncoders, GoldenBytesFromLlamaCpp) {
  const std::vector<float> x64 = golden_row(64), x256 = golden_row(256);
  std::vector<float> imp(64);
  for (int i = 0; i < 64; ++i) imp[static_cast<size_t>(i)] = golden_imp(i);
  expect_bytes(ggml::Q4_1, encode(ggml::Q4_1, x64), kQ4_1, sizeof kQ4_1, "golden row");
  expect_bytes(ggml::Q5_0, encode(ggml::Q5_0, x64), kQ5_0, sizeof kQ5_0, "golden row");
  expect_bytes(ggml::Q5_1, encode(ggml::Q5_1, x64), kQ5_1, sizeof kQ5_1, "golden row");
  expect_bytes(ggml::IQ4_NL, encode(ggml::IQ4_NL, x64), kIq4Nl, sizeof kIq4Nl, "golden row");
  expect_bytes(ggml::IQ4_NL, encode(ggml::IQ4_NL, x64, imp.data()), kIq4NlImatrix, sizeof kIq4NlImatrix,
               "golden row with importance");
  expect_bytes(ggml::MXFP4, encode(ggml::MXFP4, x64), kMxfp4, sizeof kMxfp4, "golden row");
  // The k-quants without importance: llama.cpp's quantize_row_q*_K_ref, including the codes a sub-block
  // whose stored scale is 0 keeps (sub-blocks 3 and 10 of the golden row).
  expect_bytes(ggml::Q2_K, encode(ggml::Q2_K, x256), kQ2_K, sizeof kQ2_K, "golden row");
  expect_bytes(ggml::Q3_K, encode(ggml::Q3_K, x256), kQ3_K, sizeof kQ3_K, "golden row");
  expect_bytes(ggml::Q4_K, encode(ggml::Q4_K, x256), kQ4_K, sizeof kQ4_K, "golden row");
  expect_bytes(ggml::Q5_K, encode(ggml::Q5_K, x256), kQ5_K, sizeof kQ5_K, "golden row");
  expect_bytes(ggml::Q6_K, encode(ggml::Q6_K, x256), kQ6_K, sizeof kQ6_K, "golden row");
}

TEST(GgufEncoders, EveryNewTypeHasAnEncoderAndClaimsWhatItDecodes) {
  for (int type : kNewTypes) {
    const FormatInfo* f = format_by_ggml_type(type);
    ASSERT_TRUE(f && f->quantize_row) << type;
    const std::vector<float> x = normal(32 * 40, 3);
    std::vector<float> claimed;
    const auto b = encode(type, x, nullptr, &claimed);
    const auto y = decode(type, b, x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(claimed[i], y[i]) << f->name << " element " << i;
  }
  EXPECT_TRUE(format_by_ggml_type(ggml::IQ4_NL)->quantize_row_weighted);
  EXPECT_FALSE(format_by_ggml_type(ggml::IQ4_NL)->row_grid);  // no affine grid: GPTQ cannot drive it
}

TEST(GgufEncoders, ErrorIsBoundedPerBlock) {
  // Worst case per element relative to the block's max |x|, plus the fp16 rounding of the scale: Q4_1 half
  // a step, range / 30 <= amax / 15; Q5_0 amax / 16 (codes -16..15: the side opposite the signed max clips
  // at 15 / 16 of it); Q5_1 range / 62 <= amax / 31; IQ4_NL half the widest grid gap, 12 d with d ~ amax /
  // 113 .. amax / 127; MXFP4 half a step (<= amax / 4) or the clip of a block max in [6, 8) x its scale.
  const double bound[] = {0.5 * 2 / 15 + 0.01, 1.0 / 16 + 0.01, 0.5 * 2 / 31 + 0.01, 0.12, 0.26};
  const double rms_bound[] = {0.11, 0.06, 0.06, 0.11, 0.2};
  std::mt19937 rng(4);
  std::student_t_distribution<float> td(3);
  for (int k = 0; k < 5; ++k) {
    const int type = kNewTypes[k];
    for (int dist = 0; dist < 2; ++dist) {
      std::vector<float> x = normal(32 * 256, 5 + dist);
      if (dist == 1)
        for (auto& v : x) v = td(rng);
      const auto y = decode(type, encode(type, x), x.size());
      double e2 = 0, s2 = 0;
      for (size_t b = 0; b < x.size() / 32; ++b) {
        float amax = 0;
        for (size_t j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
        for (size_t j = 0; j < 32; ++j) {
          const size_t i = 32 * b + j;
          ASSERT_LE(std::fabs(y[i] - x[i]), bound[k] * amax)
              << ggml_type_info(type)->name << " dist " << dist << " element " << i;
          e2 += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
          s2 += double(x[i]) * x[i];
        }
      }
      if (dist == 0) {
        EXPECT_LT(std::sqrt(e2 / s2), rms_bound[k]) << ggml_type_info(type)->name;
      }
    }
  }
}

TEST(GgufEncoders, ScaleRules) {
  std::vector<float> x = normal(32, 6);
  x[7] = -3.25f;  // the element of largest |x|, negative
  float mn = FLT_MAX, mx = -FLT_MAX;
  for (float v : x) mn = std::fmin(mn, v), mx = std::fmax(mx, v);
  // Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min, both fp16.
  auto b = encode(ggml::Q4_1, x);
  EXPECT_EQ(ld16(b.data()), f32_to_f16((mx - mn) / 15));
  EXPECT_EQ(ld16(b.data() + 2), f32_to_f16(mn));
  b = encode(ggml::Q5_1, x);
  EXPECT_EQ(ld16(b.data()), f32_to_f16((mx - mn) / 31));
  EXPECT_EQ(ld16(b.data() + 2), f32_to_f16(mn));
  // Q5_0: d = m / -16 for the signed maximum m, which takes code 0 (value -16 d = m up to fp16 rounding).
  b = encode(ggml::Q5_0, x);
  EXPECT_EQ(ld16(b.data()), f32_to_f16(-3.25f / -16));
  EXPECT_EQ(decode(ggml::Q5_0, b, 32)[7], -3.25f);
  // MXFP4: e = floor(log2 amax) - 2 + 127: 3.25 -> 2^-1 steps, the max saturates to 6 x 0.5 = 3.
  b = encode(ggml::MXFP4, x);
  EXPECT_EQ(b[0], 126);
  EXPECT_EQ(decode(ggml::MXFP4, b, 32)[7], -3.0f);
  // An Inf in the block takes the largest exponent (log2(Inf) has no int: UBSan checks the cast).
  std::vector<float> xi = x;
  xi[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(encode(ggml::MXFP4, xi)[0], 254);
  // IQ4_NL: the least-squares step sits near max / 127 (the grid's -127 end takes the signed max).
  b = encode(ggml::IQ4_NL, x);
  const float d = f16_to_f32(ld16(b.data()));
  EXPECT_GT(d, 0.0f);
  EXPECT_NEAR(d, 3.25f / 127, 0.1f * 3.25f / 127);
  EXPECT_EQ(b[2 + 7] & 0x0F, 0);  // element 7 -> grid index 0 (-127)
}

TEST(GgufEncoders, ZeroAndConstantRows) {
  const std::vector<float> zero(64, 0.0f);
  for (int type : kNewTypes) {
    const auto y = decode(type, encode(type, zero), zero.size());
    for (float v : y) ASSERT_EQ(v, 0.0f) << ggml_type_info(type)->name;
  }
  // llama.cpp's zero blocks: IQ4_NL d = 0 with every index 8 (the grid's +1); MXFP4 e = 0, codes 0.
  auto b = encode(ggml::IQ4_NL, zero);
  EXPECT_EQ(ld16(b.data()), 0);
  for (int j = 2; j < 18; ++j) EXPECT_EQ(b[static_cast<size_t>(j)], 0x88);
  b = encode(ggml::MXFP4, zero);
  for (uint8_t v : b) EXPECT_EQ(v, 0);
  // Constant rows decode to the constant: 1.5 is exact in every format (Q4_1/Q5_1 d = 0, m = 1.5; Q5_0
  // d = -3/32; MXFP4 6 x 2^-2); IQ4_NL within the fp16 rounding of its step.
  for (float c : {1.5f, -1.5f}) {
    const std::vector<float> x(64, c);
    for (int type : kNewTypes) {
      const auto y = decode(type, encode(type, x), x.size());
      for (float v : y) {
        if (type == ggml::IQ4_NL) {
          ASSERT_NEAR(v, c, 1e-3) << ggml_type_info(type)->name;
        } else {
          ASSERT_EQ(v, c) << ggml_type_info(type)->name;
        }
      }
    }
  }
}

TEST(GgufEncoders, ExtremesStayFinite) {
  // +-values near the top of each format's range: decodes finite, error within the per-block bound.
  std::vector<float> x = normal(64, 8);
  for (size_t i = 0; i < x.size(); i += 5) x[i] = (i % 2 ? -1.0f : 1.0f) * 60000.0f;
  for (int type : {ggml::Q4_1, ggml::Q5_0, ggml::Q5_1, ggml::IQ4_NL, ggml::MXFP4}) {
    const int64_t q = type == ggml::Q4_1 || type == ggml::Q5_1 ? 2 : 1;  // affine: the range is 2 amax
    const std::vector<float> xs = type == ggml::Q4_1 || type == ggml::Q5_1 ? normal(64, 9, 1000) : x;
    const auto y = decode(type, encode(type, xs), xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << ggml_type_info(type)->name << " element " << i;
      float amax = 0;
      for (size_t j = i / 32 * 32; j < i / 32 * 32 + 32; ++j) amax = std::fmax(amax, std::fabs(xs[j]));
      ASSERT_LE(std::fabs(y[i] - xs[i]), 0.26 * q * amax) << ggml_type_info(type)->name << " " << i;
    }
  }
  // Beyond fp16 IQ4_NL saturates its step (llama.cpp would store Inf); MXFP4 covers the whole f32 range.
  std::vector<float> big(32);
  for (size_t i = 0; i < big.size(); ++i) big[i] = (i % 2 ? -1.0f : 1.0f) * 1e30f * (1 + 0.1f * i);
  auto y = decode(ggml::IQ4_NL, encode(ggml::IQ4_NL, big), 32);
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
  for (float m : {3.0e38f, -3.0e38f, 1e-40f, 1.2e-38f}) {
    std::vector<float> z(32, 0.0f);
    z[3] = m;
    z[20] = -m / 2;
    const auto b = encode(ggml::MXFP4, z);
    y = decode(ggml::MXFP4, b, 32);
    for (float v : y) ASSERT_TRUE(std::isfinite(v)) << m;
    // (below the smallest MXFP4 value, 0.5 x 2^-127, a block encodes e = 0 and rounds to 0)
    EXPECT_LE(std::fabs(y[3] - m), std::fmax(0.34f * std::fabs(m), std::ldexp(0.25f, -127))) << m;
  }
}

TEST(GgufEncoders, Iq4NlImportance) {
  // Zero importance everywhere is the unweighted rule; hot columns pull the error off themselves.
  const size_t n = 32 * 256;
  const std::vector<float> x = normal(n, 10);
  const std::vector<float> zeros(n, 0.0f);
  EXPECT_EQ(encode(ggml::IQ4_NL, x, zeros.data()), encode(ggml::IQ4_NL, x));
  std::vector<float> imp(n, 1.0f);
  for (size_t i = 0; i < n; i += 8) imp[i] = 100.0f;
  const auto yp = decode(ggml::IQ4_NL, encode(ggml::IQ4_NL, x), n);
  std::vector<float> claimed;
  const auto bw = encode(ggml::IQ4_NL, x, imp.data(), &claimed);
  const auto yw = decode(ggml::IQ4_NL, bw, n);
  double ep = 0, ew = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(claimed[i], yw[i]) << i;
    ep += imp[i] * (yp[i] - x[i]) * (yp[i] - x[i]);
    ew += imp[i] * (yw[i] - x[i]) * (yw[i] - x[i]);
  }
  EXPECT_LT(ew, 0.9 * ep);
}

TEST(GgufEncoders, Iq4XsGoldenBytesAndGrid) {
  const std::vector<float> x = golden_row(256);
  std::vector<float> imp(256);
  for (int i = 0; i < 256; ++i) imp[static_cast<size_t>(i)] = golden_imp(i);
  expect_bytes(ggml::IQ4_XS, encode(ggml::IQ4_XS, x), kIq4Xs, sizeof kIq4Xs, "golden row");
  expect_bytes(ggml::IQ4_XS, encode(ggml::IQ4_XS, x, imp.data()), kIq4XsImatrix, sizeof kIq4XsImatrix,
               "golden row with importance");
  // GPTQ's view of a row: scale * code_values[code] is what the decoder returns, and set_row_codes with the
  // codes the grid implies rebuilds the row byte for byte.
  const FormatInfo* f = format_by_ggml_type(ggml::IQ4_XS);
  ASSERT_TRUE(f->row_grid && f->set_row_codes && f->code_values && f->quantize_row_weighted);
  const std::vector<float> w = normal(256 * 6, 21, 0.05f);
  std::vector<float> claimed;
  const auto b = encode(ggml::IQ4_XS, w, nullptr, &claimed);
  const auto y = decode(ggml::IQ4_XS, b, w.size());
  std::vector<float> sc(w.size()), off(w.size());
  f->row_grid(b.data(), sc.data(), off.data(), static_cast<int64_t>(w.size()));
  std::vector<int8_t> codes(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_EQ(claimed[i], y[i]) << i;
    ASSERT_EQ(off[i], 0.0f);
    int found = -1;
    for (int c = f->code_min; c <= f->code_max && found < 0; ++c)
      if (sc[i] * static_cast<float>(f->code_values[c]) == y[i]) found = c;
    ASSERT_GE(found, 0) << "element " << i << " is not on its grid";
    codes[i] = static_cast<int8_t>(found);
  }
  std::vector<uint8_t> rebuilt = b;
  for (size_t s = 0; s < rebuilt.size(); s += 136)
    std::fill(rebuilt.begin() + s + 8, rebuilt.begin() + s + 136, 0);
  f->set_row_codes(rebuilt.data(), codes.data(), static_cast<int64_t>(w.size()));
  EXPECT_EQ(rebuilt, b);
}

TEST(GgufEncoders, Iq4XsZeroExtremesAndImportance) {
  // llama.cpp's all-zero super-block: d = -0 (fp16 0x8000), every scale 32 (0), every code 8 (the grid's +1).
  const auto z = encode(ggml::IQ4_XS, std::vector<float>(256, 0.0f));
  EXPECT_EQ(z[0], 0x00);
  EXPECT_EQ(z[1], 0x80);
  for (int i = 8; i < 136; ++i) ASSERT_EQ(z[static_cast<size_t>(i)], 0x88) << i;
  // Error bound: half the widest grid gap (24) of the sub-block step, the step within 1/64 of the largest.
  for (float mag : {1e-3f, 1.0f, 3e4f}) {  // (below ~1e-4 the fp16 d is subnormal, as in llama.cpp)
    const std::vector<float> x = normal(512, 4, mag);
    const auto y = decode(ggml::IQ4_XS, encode(ggml::IQ4_XS, x), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      float amax = 0;
      for (size_t j = i / 256 * 256; j < i / 256 * 256 + 256; ++j) amax = std::fmax(amax, std::fabs(x[j]));
      ASSERT_LE(std::fabs(y[i] - x[i]), 0.11f * amax) << mag << " element " << i;
    }
  }
  // Beyond fp16 the super-block step saturates (llama.cpp stores Inf) and sums that would overflow are
  // taken in power-of-two units: every decoded value finite, the signs kept.
  std::vector<float> big(256);
  for (size_t i = 0; i < big.size(); ++i) big[i] = (i % 2 ? -1.0f : 1.0f) * 1e30f * (1 + 0.01f * i);
  const auto yb = decode(ggml::IQ4_XS, encode(ggml::IQ4_XS, big), big.size());
  for (size_t i = 0; i < big.size(); ++i) {
    ASSERT_TRUE(std::isfinite(yb[i])) << i;
    ASSERT_EQ(std::signbit(yb[i]), std::signbit(big[i])) << i;
  }
  // Importance moves the error toward the unimportant elements; zero importance is the unweighted rule.
  const std::vector<float> x = normal(256 * 8, 5);
  std::vector<float> imp(x.size(), 0.0f);
  EXPECT_EQ(encode(ggml::IQ4_XS, x, imp.data()), encode(ggml::IQ4_XS, x));
  for (size_t i = 0; i < imp.size(); ++i) imp[i] = i % 4 == 0 ? 100.0f : 0.01f;
  const auto yp = decode(ggml::IQ4_XS, encode(ggml::IQ4_XS, x), x.size());
  const auto yw = decode(ggml::IQ4_XS, encode(ggml::IQ4_XS, x, imp.data()), x.size());
  double ep = 0, ew = 0;
  for (size_t i = 0; i < x.size(); i += 4) {
    ep += (yp[i] - x[i]) * (yp[i] - x[i]);
    ew += (yw[i] - x[i]) * (yw[i] - x[i]);
  }
  EXPECT_LT(ew, 0.8 * ep);
}
