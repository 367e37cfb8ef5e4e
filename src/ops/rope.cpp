#include "ops/rope.h"

#include <cmath>

namespace lowbit {

Rope::Rope(const ModelConfig& c, const std::vector<float>& freq_factors)
    : head_dim_(c.head_dim), style_(c.rope_style), inv_freq_(c.head_dim / 2) {
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < head_dim_ / 2; ++i) {
    double f = 1.0 / std::pow(c.rope_theta, 2.0 * i / head_dim_);
    const auto& s = c.rope_scaling;
    if (s.type == "linear") {
      f /= s.factor;
    } else if (s.type == "llama3") {
      double low_wl = s.original_max_position / s.low_freq_factor;
      double high_wl = s.original_max_position / s.high_freq_factor;
      double wl = 2 * pi / f;
      if (wl > low_wl) {
        f /= s.factor;
      } else if (wl >= high_wl) {
        double smooth =
            (s.original_max_position / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    if (!freq_factors.empty()) f /= freq_factors[i];
    inv_freq_[i] = f;
  }
}

void Rope::angles(int64_t pos, float* cs) const {
  const int64_t half = head_dim_ / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = static_cast<double>(pos) * inv_freq_[i];
    cs[i] = static_cast<float>(std::cos(a));
    cs[half + i] = static_cast<float>(std::sin(a));
  }
}

void Rope::apply(float* x, int64_t n_heads, const float* cs) const {
  const int64_t half = head_dim_ / 2;
  const bool inter = style_ == RopeStyle::Interleaved;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim_;
    for (int64_t i = 0; i < half; ++i) {
      const float c = cs[i], s = cs[half + i];
      const int64_t i0 = inter ? 2 * i : i, i1 = inter ? 2 * i + 1 : i + half;
      const float a0 = v[i0], a1 = v[i1];
      v[i0] = a0 * c - a1 * s;
      v[i1] = a0 * s + a1 * c;
    }
  }
}

void Rope::apply(float* x, int64_t n_heads, int64_t pos) const {
  thread_local std::vector<float> cs;
  cs.resize(static_cast<size_t>(head_dim_));
  angles(pos, cs.data());
  apply(x, n_heads, cs.data());
}

}  // namespace lowbit
