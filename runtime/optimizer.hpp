#pragma once

// First-order optimizers: hyperparameters (optimizer_config) apart from the
// per-parameter state (optimizer_slots), which is serialisable so that a
// checkpoint or a PS shard hand-over can carry it.

#include <cstdint>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/meta/type_name.hpp>

#include "runtime/named_tensor.hpp"
#include "runtime/optimizer_config.hpp"

namespace syncfac {

struct optimizer_slots {
  /// Updates applied so far (Adam's bias correction needs it).
  int64_t step = 0;
  /// Momentum velocity, or Adam's first moment.
  parameter_set first;
  /// Adam's second moment; empty otherwise.
  parameter_set second;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, optimizer_slots& x) {
  return f(caf::meta::type_name("optimizer_slots"), x.step, x.first,
           x.second);
}

class optimizer {
public:
  /// An optimizer for parameters shaped like `params`, slots at zero.
  static caf::expected<optimizer> make(const optimizer_config& config,
                                       const parameter_set& params);

  /// One update of `params` with `grads` (same names and shapes, finite).
  caf::error apply(parameter_set& params, const parameter_set& grads);

  const optimizer_config& config() const noexcept {
    return config_;
  }

  const optimizer_slots& slots() const noexcept {
    return slots_;
  }

  /// Replaces the state, e.g. from a checkpoint; shapes must match.
  caf::error restore(optimizer_slots slots);

private:
  optimizer(optimizer_config config, optimizer_slots slots);

  optimizer_config config_;
  optimizer_slots slots_;
};

} // namespace syncfac
