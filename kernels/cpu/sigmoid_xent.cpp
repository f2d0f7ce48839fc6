// Sigmoid cross-entropy (independent Bernoulli outputs) over [N, D] logits:
// the loss of an autoencoder whose outputs reconstruct pixels in [0, 1].

#include <algorithm>
#include <cmath>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/mean_loss.hpp"

namespace syncfac::cpu {

namespace {

// Writes sigmoid(x) to p and returns the row's summed cross-entropy
// max(x, 0) - x t + log1p(exp(-|x|)): e = exp(-|x|) never overflows, and
// the sigmoid comes from the same e (1 / (1 + e) or e / (1 + e)).
double sigmoid_xent_row(const float* x, const float* t, int64_t D, float* p) {
  double sum = 0.0;
  for (int64_t d = 0; d < D; ++d) {
    float v = x[d];
    float e = std::exp(-std::abs(v));
    float inv = 1.0f / (1.0f + e);
    p[d] = v >= 0.0f ? inv : e * inv;
    sum += static_cast<double>(std::max(v, 0.0f) - v * t[d])
           + static_cast<double>(std::log1p(e));
  }
  return sum;
}

} // namespace

caf::error cpu_backend::sigmoid_xent_forward(const tensor& logits,
                                             const tensor& targets,
                                             tensor& probs, float& loss) {
  if (auto err = check_sigmoid_pair("sigmoid_xent_forward", "logits",
                                    logits, targets))
    return err;
  auto N = logits.dim(0);
  auto D = logits.dim(1);
  probs.resize(logits.shape());
  loss = mean_row_loss(threads_, N, D, row_losses_, [&](int64_t r) {
    return sigmoid_xent_row(logits.data() + r * D, targets.data() + r * D, D,
                            probs.data() + r * D);
  });
  return caf::none;
}

caf::error cpu_backend::sigmoid_xent_backward(const tensor& probs,
                                              const tensor& targets,
                                              tensor& dlogits) {
  if (auto err = check_sigmoid_pair("sigmoid_xent_backward", "probs",
                                    probs, targets))
    return err;
  auto D = probs.dim(1);
  mean_loss_gradient(threads_, probs, dlogits,
                     [&](int64_t r, const float* p, float* d, float scale) {
                       const float* t = targets.data() + r * D;
                       for (int64_t k = 0; k < D; ++k)
                         d[k] = (p[k] - t[k]) * scale;
                     });
  return caf::none;
}

} // namespace syncfac::cpu
