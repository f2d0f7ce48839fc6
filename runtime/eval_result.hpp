#pragma once

#include <cstdint>

#include "runtime/inspect.hpp"
#include "runtime/wire_float.hpp"

namespace syncfac {

/// Loss and accuracy sums over some examples; sums so that results of
/// several batches (or workers) add up.
struct eval_result {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;
  /// Autoencoders: the sum over examples of the squared reconstruction
  /// error sum_d (x_d - sigmoid(logit_d))^2 (0 for classifiers, whose
  /// `correct` counts instead).
  double sq_error_sum = 0;

  eval_result& operator+=(const eval_result& other) {
    loss_sum += other.loss_sum;
    correct += other.correct;
    count += other.count;
    sq_error_sum += other.sq_error_sum;
    return *this;
  }

  double mean_loss() const {
    return count > 0 ? loss_sum / static_cast<double>(count) : 0.0;
  }

  double accuracy() const {
    return count > 0 ? static_cast<double>(correct) / static_cast<double>(count)
                     : 0.0;
  }

  /// The classic "reconstruction error" of autoencoder benchmarks: the mean
  /// over examples of the per-example squared error.
  double reconstruction_error() const {
    return count > 0 ? sq_error_sum / static_cast<double>(count) : 0.0;
  }
};

SYNCFAC_INSPECT(eval_result, wire(x.loss_sum), x.correct, x.count,
                wire(x.sq_error_sum))

} // namespace syncfac
