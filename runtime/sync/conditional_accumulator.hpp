#pragma once

// Per-variable gradient accumulators with TensorFlow's staleness rule
// (docs/design.md §2): a gradient computed at local_step is taken in only if
// local_step >= the accumulator's global_step; a take averages what arrived
// and moves global_step on by one. Plain classes: the PS shard actor that
// owns them holds pending take requests itself until ready() says so.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/tensor.hpp"
#include "runtime/base/error.hpp"
#include "runtime/inspect.hpp"

namespace syncfac {

/// What an accumulator has seen, for status reports and logs. TF drops
/// stale gradients silently; we count every drop and every refusal.
struct accumulator_stats {
  std::string variable;
  int64_t accepted = 0;
  int64_t dropped_stale = 0;
  int64_t refused = 0;
  int64_t global_step = 0;
};

SYNCFAC_INSPECT(accumulator_stats, x.variable, x.accepted, x.dropped_stale,
                x.refused, x.global_step)

bool operator==(const accumulator_stats& x, const accumulator_stats& y);

inline bool operator!=(const accumulator_stats& x,
                       const accumulator_stats& y) {
  return !(x == y);
}

/// The step gate and counters shared by the dense and sparse accumulators.
/// They inherit it publicly: its public part is their read-only view (and
/// the chief's step and round controls); admitting, refusing and closing a
/// round stay protected, so only the accumulator itself decides what is
/// admitted.
class accumulator_ledger {
public:
  explicit accumulator_ledger(std::string variable);

  const std::string& variable() const noexcept {
    return variable_;
  }

  /// Gradients taken in since the last take.
  int64_t count() const noexcept {
    return count_;
  }

  /// Whether a take(n) would succeed now.
  bool ready(int64_t n) const noexcept {
    return n > 0 && count_ >= n;
  }

  int64_t global_step() const noexcept {
    return global_step_;
  }

  /// Assigns the step (the chief does so on start and restore). Like TF,
  /// this keeps a partial sum: gradients already taken in were fresh when
  /// they arrived, and the chief re-synchronises before it takes.
  void set_global_step(int64_t step) noexcept {
    global_step_ = step;
  }

  /// Gradients taken in over the accumulator's life.
  int64_t accepted() const noexcept {
    return accepted_;
  }

  int64_t dropped_stale() const noexcept {
    return dropped_stale_;
  }

  /// Malformed gradients (wrong shape, bad indices, NaN/Inf).
  int64_t refused() const noexcept {
    return refused_;
  }

  accumulator_stats stats() const;

  /// Ends a round in which no gradient of this variable came (TF's
  /// grad=None in every push of the step): the step moves on with nothing
  /// to take. ec::invalid_argument if gradients are waiting.
  caf::error skip_round();

protected:
  /// Counts a refusal and hands `err` back.
  caf::error refuse(caf::error err);

  /// Applies the staleness rule to a valid gradient: true when it is to
  /// be added (counted as accepted), false when it is stale (counted).
  bool admit(int64_t local_step);

  /// An error unless take(n) may proceed now.
  caf::error check_take(int64_t n) const;

  /// Ends a round after a take: the counter restarts, the step moves on.
  void close_round();

  /// Forgets the round's gradients without a take (the step stays).
  void reset_round() noexcept {
    count_ = 0;
  }

  /// "variable 'v0': " + what; every error message names the variable.
  std::string context(const std::string& what) const;

private:
  std::string variable_;
  int64_t count_ = 0;
  int64_t global_step_ = 0;
  int64_t accepted_ = 0;
  int64_t dropped_stale_ = 0;
  int64_t refused_ = 0;
};

namespace detail {

/// Index of the first NaN or Inf among xs[0..n), or n if there is none.
int64_t first_non_finite(const float* xs, int64_t n) noexcept;

/// The shape, plus the value count when it does not match the shape (a
/// default-constructed tensor has shape [] but no value).
std::string describe(const tensor& x);

/// Whether x has exactly `shape` and the values to go with it.
bool has_shape(const tensor& x, const tensor_shape& shape) noexcept;

} // namespace detail

/// `count` values of a gradient from element `offset` of its flattened
/// variable on: one slice of a push that came in parts. A view: the values
/// belong to the push.
struct gradient_piece {
  int64_t offset = 0;
  const float* values = nullptr;
  int64_t count = 0;
};

/// What an accumulator's check() finds wrong with a gradient, without the
/// variable's name: apply() puts "variable 'v': " before it, the PS shard
/// names the push as well.
struct gradient_problem {
  ec code;
  std::string what;
};

/// Accumulates dense gradients of one variable.
class conditional_accumulator : public accumulator_ledger {
public:
  /// Throws std::invalid_argument on a negative dimension (a bug of the
  /// caller, which takes shapes from its own variables).
  conditional_accumulator(std::string variable, tensor_shape shape);

  /// Never blocks. Returns true when the gradient was added, false when
  /// it was stale and dropped. A gradient of the wrong shape
  /// (ec::shape_mismatch) or with NaN/Inf (ec::non_finite) is refused and
  /// changes nothing but refused().
  caf::expected<bool> apply(int64_t local_step, const tensor& grad);

  /// The same for a gradient that came in pieces (a push in parts,
  /// messages/push_parts.hpp), added where they belong without
  /// assembling the whole first: the sums are those of the whole gradient,
  /// bit for bit. Pieces that do not cover the variable exactly once are
  /// refused (ec::shape_mismatch), as are NaN/Inf (ec::non_finite), and
  /// change nothing but refused().
  caf::expected<bool> apply(int64_t local_step,
                            std::vector<gradient_piece> pieces);

  /// What apply() would refuse `grad` for, if anything; changes nothing.
  std::optional<gradient_problem> check(const tensor& grad) const;

  /// The same for pieces, which it sorts by offset.
  std::optional<gradient_problem>
  check(std::vector<gradient_piece>& pieces) const;

  /// apply() of a gradient check() found nothing wrong with: the staleness
  /// rule and the sum only. For a caller that checks a whole push before
  /// adding any of it (the PS shard), so that each gradient is checked
  /// once; anything else calls apply().
  bool apply_checked(int64_t local_step, const tensor& grad);

  /// apply_checked() of pieces check() found nothing wrong with.
  bool apply_checked(int64_t local_step,
                     const std::vector<gradient_piece>& pieces);

  /// The average of the gradients since the last take, divided by count()
  /// (which may exceed n, as in TF); then resets and increments
  /// global_step. ec::invalid_argument when n <= 0 or fewer than n
  /// gradients arrived (the caller waits for ready(n) and asks again).
  caf::expected<tensor> take(int64_t n);

  /// The sum of the squares of the values take(n) would return now, which
  /// it leaves to come (--clip_norm's global norm); errors as take.
  caf::expected<double> average_sum_of_squares(int64_t n) const;

  /// Drops the gradients since the last take: after a rollback to a
  /// checkpoint they belong to variables that no longer exist.
  void discard();

  const tensor_shape& shape() const noexcept {
    return shape_;
  }

private:
  tensor_shape shape_;
  // Float, as TF accumulates in the gradient's dtype: the averages match
  // TF's bit for bit, and a round sums only a few dozen gradients, so a
  // double buffer would double the memory for no visible accuracy.
  tensor sum_;
};

} // namespace syncfac
