// Softmax cross-entropy and accuracy over [N, K] logits.

#include <algorithm>
#include <cmath>

#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/mean_loss.hpp"

namespace syncfac::cpu {

namespace {

// Writes softmax(x) to p and returns -log softmax(x)[label], shifting by
// the row maximum so that exp never overflows.
double softmax_row(const float* x, int64_t K, int32_t label, float* p) {
  float mx = *std::max_element(x, x + K);
  double sum = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    p[k] = std::exp(x[k] - mx);
    sum += p[k];
  }
  auto inv = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < K; ++k)
    p[k] *= inv;
  return std::log(sum) - static_cast<double>(x[label] - mx);
}

} // namespace

caf::error cpu_backend::softmax_xent_forward(const tensor& logits,
                                             const label_vector& labels,
                                             tensor& probs, float& loss) {
  if (auto err = check_labels("softmax_xent_forward", "logits",
                              logits.shape(), labels))
    return err;
  auto N = logits.dim(0);
  auto K = logits.dim(1);
  probs.resize(logits.shape());
  loss = mean_row_loss(threads_, N, K, row_losses_, [&](int64_t r) {
    return softmax_row(logits.data() + r * K, K,
                       labels[static_cast<size_t>(r)], probs.data() + r * K);
  });
  return caf::none;
}

caf::error cpu_backend::softmax_xent_backward(const tensor& probs,
                                              const label_vector& labels,
                                              tensor& dlogits) {
  if (auto err = check_labels("softmax_xent_backward", "probs", probs.shape(),
                              labels))
    return err;
  auto K = probs.dim(1);
  mean_loss_gradient(threads_, probs, dlogits,
                     [&](int64_t r, const float* p, float* d, float scale) {
                       for (int64_t k = 0; k < K; ++k)
                         d[k] = p[k] * scale;
                       d[labels[static_cast<size_t>(r)]] -= scale;
                     });
  return caf::none;
}

caf::expected<int64_t>
cpu_backend::count_correct(const tensor& logits, const label_vector& labels) {
  if (auto err = check_labels("count_correct", "logits", logits.shape(),
                              labels))
    return err;
  auto N = logits.dim(0);
  auto K = logits.dim(1);
  int64_t correct = 0;
  for (int64_t r = 0; r < N; ++r) {
    const float* x = logits.data() + r * K;
    // The first maximum wins ties, as in argmax.
    auto best = std::max_element(x, x + K) - x;
    if (best == labels[static_cast<size_t>(r)])
      ++correct;
  }
  return correct;
}

} // namespace syncfac::cpu
