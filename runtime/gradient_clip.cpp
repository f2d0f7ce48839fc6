#include "runtime/gradient_clip.hpp"

#include <algorithm>
#include <cmath>

namespace syncfac {

double sum_of_squares(const float* x, int64_t n) {
  double result = 0;
  for (int64_t i = 0; i < n; ++i)
    result += static_cast<double>(x[i]) * x[i];
  return result;
}

float clip_factor(double sum_of_squares, float clip_norm) {
  if (clip_norm <= 0)
    return 1.0f;
  auto norm = std::sqrt(sum_of_squares);
  return static_cast<float>(clip_norm / std::max<double>(norm, clip_norm));
}

} // namespace syncfac
