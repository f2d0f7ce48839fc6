// Sigmoid cross-entropy (independent Bernoulli outputs) over [N, D] logits:
// the loss of an autoencoder whose outputs reconstruct pixels in [0, 1].

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/parallel.hpp"

namespace syncfac::cpu {

namespace {

caf::error check_pair(const char* op, const char* what, const tensor& x,
                      const tensor& targets) {
  if (x.rank() != 2)
    return mismatch(op, what, x.shape(), "targets", targets.shape(),
                    std::string{what} + " must be rank 2 [N, D]");
  return expect_shape(op, "targets", targets.shape(), what, x.shape());
}

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
  if (auto err = check_pair("sigmoid_xent_forward", "logits", logits,
                            targets))
    return err;
  auto N = logits.dim(0);
  auto D = logits.dim(1);
  probs.resize(logits.shape());
  row_losses_.resize(static_cast<size_t>(N));
  for_row_parts(threads_, N, D, [&](range rows) {
    for (auto r = rows.begin; r < rows.end; ++r)
      row_losses_[static_cast<size_t>(r)]
        = sigmoid_xent_row(logits.data() + r * D, targets.data() + r * D, D,
                           probs.data() + r * D);
  });
  // Summed in row order: the same loss for any thread count.
  auto total = std::accumulate(row_losses_.begin(), row_losses_.end(), 0.0);
  loss = N > 0 ? static_cast<float>(total / static_cast<double>(N)) : 0.0f;
  return caf::none;
}

caf::error cpu_backend::sigmoid_xent_backward(const tensor& probs,
                                              const tensor& targets,
                                              tensor& dlogits) {
  if (auto err = check_pair("sigmoid_xent_backward", "probs", probs,
                            targets))
    return err;
  auto N = probs.dim(0);
  auto D = probs.dim(1);
  dlogits.resize(probs.shape());
  auto scale = N > 0 ? 1.0f / static_cast<float>(N) : 0.0f;
  for_row_parts(threads_, N, D, [&](range rows) {
    const float* p = probs.data() + rows.begin * D;
    const float* t = targets.data() + rows.begin * D;
    float* d = dlogits.data() + rows.begin * D;
    for (int64_t i = 0, n = (rows.end - rows.begin) * D; i < n; ++i)
      d[i] = (p[i] - t[i]) * scale;
  });
  return caf::none;
}

} // namespace syncfac::cpu
