// Hadamard rotation of KV heads: x <- H x / sqrt(n) per head, with H the Sylvester (Walsh-Hadamard) matrix.
// The normalised transform is orthonormal and its own inverse, so q.k is unchanged in exact arithmetic when
// both sides are rotated, and sum_p a_p (H v_p) = H (sum_p a_p v_p) lets the cache rotate the attention
// output back. Rotation spreads a channel outlier over the whole head before quantization (QuaRot /
// llama.cpp's KV rotation).
#pragma once
#include <cstdint>

#include "kernels/hadamard.h"  // fwht_normalized: the one Walsh-Hadamard transform of the tree

namespace lowbit {

bool kv_rotation_supported(int64_t head_dim);  // power of two
// Rotates n_heads consecutive heads of head_dim in place.
void rotate_heads(float* x, int64_t n_heads, int64_t head_dim);

}  // namespace lowbit
