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
#include "runtime/moving_statistic.hpp"

namespace syncfac::test {

/// Compares `m`'s gradients of a training pass on `images` and `labels`
/// with central differences (steps of ±eps) of the mean loss of training
/// passes at 6 random elements of each trained parameter (picked by a
/// generator seeded with `seed`): within atol + 2% of the difference.
/// Every pass draws the same dropout masks (one noise seed) and batch_norm
/// layers normalise by each pass's own batch statistics, so the
/// differences see what the backward pass differentiates; moving
/// statistics, which no loss depends on in training, are not probed.
/// `what` names the case in failures.
inline void check_gradient_by_differences(model& m, backend& dev,
                                          const tensor& images,
                                          const label_vector& labels,
                                          uint64_t seed, float eps,
                                          double atol,
                                          const std::string& what) {
  constexpr uint64_t noise_seed = 0x5eed;
  auto training_loss = [&] {
    m.set_noise_seed(noise_seed);
    auto res = m.forward(dev, images, labels);
    BOOST_REQUIRE(res);
    return res->mean_loss();
  };
  m.set_noise_seed(noise_seed);
  BOOST_REQUIRE(m.forward_backward(dev, images, labels));
  auto grads = m.gradients();
  std::mt19937_64 rng{seed};
  for (size_t p = 0; p < grads.size(); ++p) {
    if (is_moving_statistic(grads[p].name))
      continue;
    auto& value = m.parameters()[p].value;
    for (int probe = 0; probe < 6; ++probe) {
      auto i = static_cast<int64_t>(
        rng() % static_cast<uint64_t>(value.size()));
      auto saved = value[i];
      value[i] = saved + eps;
      auto up = training_loss();
      value[i] = saved - eps;
      auto down = training_loss();
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
