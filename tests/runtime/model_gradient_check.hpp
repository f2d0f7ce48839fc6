#pragma once

// The model suites' check of a whole model's gradient against central
// finite differences of its mean loss (model.cpp, autoencoder.cpp).

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include <boost/test/unit_test.hpp>

#include "kernels/backend.hpp"
#include "runtime/model.hpp"

namespace syncfac::test {

/// Compares `m`'s gradients, as its last forward_backward on `images` and
/// `labels` left them, with central differences (steps of ±eps) of its
/// mean loss at 6 random elements of each parameter (picked by a
/// generator seeded with `seed`): within atol + 2% of the difference.
/// `what` names the case in failures.
inline void check_gradient_by_differences(model& m, backend& dev,
                                          const tensor& images,
                                          const label_vector& labels,
                                          uint64_t seed, float eps,
                                          double atol,
                                          const std::string& what) {
  auto grads = m.gradients();
  std::mt19937_64 rng{seed};
  for (size_t p = 0; p < grads.size(); ++p) {
    auto& value = m.parameters()[p].value;
    for (int probe = 0; probe < 6; ++probe) {
      auto i = static_cast<int64_t>(
        rng() % static_cast<uint64_t>(value.size()));
      auto saved = value[i];
      value[i] = saved + eps;
      auto up = m.evaluate(dev, images, labels)->mean_loss();
      value[i] = saved - eps;
      auto down = m.evaluate(dev, images, labels)->mean_loss();
      value[i] = saved;
      auto numeric = (up - down) / (2 * eps);
      auto analytic = static_cast<double>(grads[p].value[i]);
      BOOST_TEST_CONTEXT(what << grads[p].name << "[" << i << "]") {
        BOOST_TEST(std::abs(numeric - analytic)
                     <= atol + 2e-2 * std::abs(numeric),
                   "numeric " << numeric << " vs analytic " << analytic);
      }
    }
  }
}

} // namespace syncfac::test
