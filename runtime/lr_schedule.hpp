#pragma once

// The learning rate as a function of the global step: a warm-up, then a
// constant rate, steps down at given global steps, or a cosine or
// polynomial decay to a final fraction. The PS shards compute it from the
// global step they apply (docs/models.md, "Learning-rate schedules"), so
// every replica uses the same rate and a resumed run goes on with the rate
// the uninterrupted one would have had: the global step is checkpointed,
// the schedule is a pure function of it and of flags every node agrees on.

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/inspect.hpp"

namespace syncfac {

enum class lr_schedule_kind : uint8_t {
  /// The base rate after the warm-up.
  constant,
  /// The base rate times decay_rate^k, k the boundaries reached.
  step,
  /// Half a cosine from the base rate down to end_factor of it, from the
  /// end of the warm-up to decay_steps (as Loshchilov & Hutter's SGDR
  /// without restarts, and Hugging Face's cosine-with-warm-up).
  cosine,
  /// (1 - t)^power from the base rate down to end_factor of it, t the
  /// fraction of [warmup_steps, decay_steps] passed (TF's
  /// PolynomialDecay; power 1 is linear).
  polynomial,
};

const char* to_string(lr_schedule_kind x) noexcept;
caf::expected<lr_schedule_kind> parse_lr_schedule_kind(const std::string& s);

struct lr_schedule {
  lr_schedule_kind kind = lr_schedule_kind::constant;
  /// The rate rises linearly over the first warmup_steps global steps:
  /// step s (0-based, the update that makes global step s + 1) uses
  /// (s + 1) / warmup_steps of the scheduled rate.
  int64_t warmup_steps = 0;
  /// kind step: the global steps, increasing, from which the rate is
  /// multiplied by decay_rate once more.
  std::vector<int64_t> boundaries;
  float decay_rate = 0.1f;
  /// kinds cosine and polynomial: the global step where the decay ends
  /// (counted from 0, warm-up included); the rate stays at its end there.
  int64_t decay_steps = 0;
  /// kinds cosine and polynomial: the final rate as a fraction of the
  /// base rate.
  float end_factor = 0.0f;
  /// kind polynomial: the power.
  float power = 1.0f;

  /// Names the flag that is out of range, e.g. "--lr_decay_steps 50 must
  /// be greater than --warmup_steps 100 (schedule cosine)".
  caf::error validate() const;

  /// The factor of the base rate for the update of global step `step`.
  double factor_at(int64_t step) const;
};

/// "cosine to 0 at step 2000 after 100 warm-up steps"; "" for a constant
/// rate without warm-up.
std::string describe(const lr_schedule& s);

/// "100,200" as {100, 200}, each a positive integer; an item that is not
/// is named.
caf::expected<std::vector<int64_t>>
parse_lr_boundaries(const std::string& text);

SYNCFAC_INSPECT(lr_schedule, x.kind, x.warmup_steps, x.boundaries,
                x.decay_rate, x.decay_steps, x.end_factor, x.power)

} // namespace syncfac
