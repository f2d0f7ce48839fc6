#pragma once

// The accumulator of a variable that receives sparse gradients (row indices
// plus rows, TF's IndexedSlices), e.g. an embedding table.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/tensor.hpp"
#include "runtime/inspect.hpp"
#include "runtime/sync/conditional_accumulator.hpp"

namespace syncfac {

/// Rows of a variable of shape [n, ...rest]: rows has shape
/// [indices.size(), ...rest], row i belonging to variable row indices[i].
struct sparse_gradient {
  std::vector<int64_t> indices;
  tensor rows;
};

SYNCFAC_INSPECT(sparse_gradient, x.indices, x.rows)

inline bool operator==(const sparse_gradient& x, const sparse_gradient& y) {
  return x.indices == y.indices && x.rows == y.rows;
}

inline bool operator!=(const sparse_gradient& x, const sparse_gradient& y) {
  return !(x == y);
}

/// Accumulates sparse gradients of one variable; each row is averaged over
/// the gradients that touched it (docs/design.md §2).
///
/// The rows are summed into a dense buffer of the variable's shape with a
/// per-row touch count, not into a map: the shard holds the variable itself
/// anyway, so this at most doubles its memory, and in exchange apply() is
/// direct indexing with no allocation and no tree walk. Only touched rows
/// are read and cleared on take().
class sparse_accumulator : public accumulator_ledger {
public:
  /// Throws std::invalid_argument unless the shape has rank >= 1 and no
  /// negative dimension (a bug of the caller).
  sparse_accumulator(std::string variable, tensor_shape shape);

  /// Never blocks. Returns true when the rows were added, false when the
  /// gradient was stale and dropped. Refused (and counted), changing
  /// nothing else: rows not of shape [indices.size(), ...rest]
  /// (ec::shape_mismatch); an index that is negative, out of range, not
  /// greater than its predecessor (ec::invalid_argument: TF assumes sorted,
  /// unique indices and silently produces garbage otherwise); NaN or Inf
  /// in a row (ec::non_finite). Every error names the index and position.
  caf::expected<bool> apply(int64_t local_step,
                            const std::vector<int64_t>& indices,
                            const tensor& rows);

  /// What apply() would refuse the rows for, if anything; changes nothing.
  std::optional<gradient_problem> check(const std::vector<int64_t>& indices,
                                        const tensor& rows) const;

  /// apply() of rows check() found nothing wrong with (see
  /// conditional_accumulator::apply_checked).
  bool apply_checked(int64_t local_step, const std::vector<int64_t>& indices,
                     const tensor& rows);

  /// Every row touched since the last take, by increasing index, each the
  /// average over the gradients that touched it; then resets and
  /// increments global_step. Errors as conditional_accumulator::take.
  caf::expected<sparse_gradient> take(int64_t n);

  /// The sum of the squares of the rows take(n) would return now, which
  /// it leaves to come (--clip_norm's global norm); errors as take.
  caf::expected<double> average_sum_of_squares(int64_t n) const;

  /// Drops the rows since the last take (a rollback; see the dense one).
  void discard();

  const tensor_shape& shape() const noexcept {
    return shape_;
  }

  /// Distinct rows touched since the last take.
  int64_t touched_rows() const noexcept {
    return static_cast<int64_t>(touched_.size());
  }

private:
  std::optional<gradient_problem>
  check_indices(const std::vector<int64_t>& indices) const;
  std::optional<gradient_problem>
  check_finite(const std::vector<int64_t>& indices, const tensor& rows) const;
  void add(const std::vector<int64_t>& indices, const tensor& rows);

  /// [k, ...rest]: the shape of k rows.
  tensor_shape rows_shape(int64_t k) const;

  tensor_shape shape_;
  int64_t row_size_;
  tensor sum_;
  /// Per variable row: how many gradients touched it since the last take.
  std::vector<int64_t> hits_;
  /// The rows with hits_ > 0, in first-touch order; capacity for every
  /// row is reserved up front so that apply() never allocates.
  std::vector<int64_t> touched_;
};

} // namespace syncfac
