#include "runtime/sync/conditional_accumulator.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <Eigen/Core>

#include "runtime/base/error.hpp"

namespace syncfac {

bool operator==(const accumulator_stats& x, const accumulator_stats& y) {
  return x.variable == y.variable && x.accepted == y.accepted
         && x.dropped_stale == y.dropped_stale && x.refused == y.refused
         && x.global_step == y.global_step;
}

// -- accumulator_ledger -------------------------------------------------------

accumulator_ledger::accumulator_ledger(std::string variable)
  : variable_(std::move(variable)) {
}

accumulator_stats accumulator_ledger::stats() const {
  return {variable_, accepted_, dropped_stale_, refused_, global_step_};
}

caf::error accumulator_ledger::refuse(caf::error err) {
  ++refused_;
  return err;
}

bool accumulator_ledger::admit(int64_t local_step) {
  if (local_step < global_step_) {
    ++dropped_stale_;
    return false;
  }
  ++count_;
  ++accepted_;
  return true;
}

caf::error accumulator_ledger::check_take(int64_t n) const {
  if (n <= 0)
    return make_error(ec::invalid_argument,
                      context("take needs a positive number of gradients, got "
                              + std::to_string(n)));
  if (count_ < n)
    return make_error(ec::invalid_argument,
                      context("not ready: " + std::to_string(count_) + " of "
                              + std::to_string(n) + " gradients"));
  return caf::none;
}

caf::error accumulator_ledger::skip_round() {
  if (count_ != 0)
    return make_error(ec::invalid_argument,
                      context("a round with " + std::to_string(count_)
                              + " gradient(s) cannot be skipped"));
  close_round();
  return caf::none;
}

void accumulator_ledger::close_round() {
  count_ = 0;
  ++global_step_;
}

std::string accumulator_ledger::context(const std::string& what) const {
  return "variable '" + variable_ + "': " + what;
}

// -- helpers ------------------------------------------------------------------

namespace detail {

int64_t first_non_finite(const float* xs, int64_t n) noexcept {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(xs[i]))
      return i;
  return n;
}

std::string describe(const tensor& x) {
  auto result = x.shape_string();
  if (x.size() != element_count(x.shape()))
    result += " with " + std::to_string(x.size()) + " values";
  return result;
}

bool has_shape(const tensor& x, const tensor_shape& shape) noexcept {
  return x.shape() == shape && x.size() == element_count(shape);
}

} // namespace detail

namespace {

using array_map = Eigen::Map<Eigen::ArrayXf>;
using const_array_map = Eigen::Map<const Eigen::ArrayXf>;

array_map as_array(tensor& x) {
  return {x.data(), static_cast<Eigen::Index>(x.size())};
}

const_array_map as_array(const tensor& x) {
  return {x.data(), static_cast<Eigen::Index>(x.size())};
}

/// Sorts `pieces` by offset; the problem when they do not cover `shape`
/// exactly once (ec::shape_mismatch) or hold NaN/Inf (ec::non_finite).
std::optional<gradient_problem>
check_pieces(const tensor_shape& shape, std::vector<gradient_piece>& pieces) {
  using detail::first_non_finite;
  std::sort(pieces.begin(), pieces.end(),
            [](const gradient_piece& x, const gradient_piece& y) {
              return x.offset < y.offset;
            });
  auto total = element_count(shape);
  int64_t next = 0;
  for (const auto& p : pieces) {
    if (p.offset != next || p.count < 1 || p.values == nullptr
        || p.count > total - next)
      return gradient_problem{ec::shape_mismatch,
                           "gradient pieces do not cover its "
                             + std::to_string(total)
                             + " elements exactly once (a piece of "
                             + std::to_string(p.count) + " at element "
                             + std::to_string(p.offset) + " where "
                             + std::to_string(next) + " was next)"};
    next += p.count;
  }
  if (next != total)
    return gradient_problem{ec::shape_mismatch,
                         "gradient pieces cover " + std::to_string(next)
                           + " of its " + std::to_string(total)
                           + " elements"};
  for (const auto& p : pieces)
    if (!all_finite(p.values, p.count))
      return gradient_problem{
        ec::non_finite,
        "gradient holds NaN or Inf (first at element "
          + std::to_string(p.offset + first_non_finite(p.values, p.count))
          + ")"};
  return std::nullopt;
}

} // namespace

// -- conditional_accumulator --------------------------------------------------

conditional_accumulator::conditional_accumulator(std::string variable,
                                                 tensor_shape shape)
  : accumulator_ledger(std::move(variable)),
    shape_(std::move(shape)),
    sum_(shape_) {
}

std::optional<gradient_problem>
conditional_accumulator::check(const tensor& grad) const {
  if (!detail::has_shape(grad, shape_))
    return gradient_problem{ec::shape_mismatch,
                            "gradient has shape " + detail::describe(grad)
                              + ", expected " + to_string(shape_)};
  if (!grad.all_finite()) {
    auto at = detail::first_non_finite(grad.data(), grad.size());
    return gradient_problem{ec::non_finite,
                            "gradient holds NaN or Inf (first at element "
                              + std::to_string(at) + ")"};
  }
  return std::nullopt;
}

std::optional<gradient_problem>
conditional_accumulator::check(std::vector<gradient_piece>& pieces) const {
  return check_pieces(shape_, pieces);
}

caf::expected<bool> conditional_accumulator::apply(int64_t local_step,
                                                   const tensor& grad) {
  // Checked before the staleness rule (TF checks fresh gradients only):
  // a malformed push is a bug of its sender, worth reporting even late.
  if (auto problem = check(grad))
    return refuse(make_error(problem->code, context(problem->what)));
  return apply_checked(local_step, grad);
}

caf::expected<bool>
conditional_accumulator::apply(int64_t local_step,
                               std::vector<gradient_piece> pieces) {
  if (auto problem = check(pieces))
    return refuse(make_error(problem->code, context(problem->what)));
  return apply_checked(local_step, pieces);
}

bool conditional_accumulator::apply_checked(int64_t local_step,
                                            const tensor& grad) {
  if (!admit(local_step))
    return false;
  as_array(sum_) += as_array(grad);
  return true;
}

bool conditional_accumulator::apply_checked(
  int64_t local_step, const std::vector<gradient_piece>& pieces) {
  if (!admit(local_step))
    return false;
  for (const auto& p : pieces) {
    array_map sum{sum_.data() + p.offset, static_cast<Eigen::Index>(p.count)};
    sum += const_array_map{p.values, static_cast<Eigen::Index>(p.count)};
  }
  return true;
}

caf::expected<double>
conditional_accumulator::average_sum_of_squares(int64_t n) const {
  if (auto err = check_take(n))
    return err;
  // The very floats take() divides out.
  const auto count = static_cast<float>(this->count());
  double result = 0;
  const auto* sum = sum_.data();
  for (int64_t i = 0; i < sum_.size(); ++i) {
    float average = sum[i] / count;
    result += static_cast<double>(average) * average;
  }
  return result;
}

caf::expected<tensor> conditional_accumulator::take(int64_t n) {
  if (auto err = check_take(n))
    return err;
  // Divides (rather than multiplying by 1/count) to match TF's numbers.
  as_array(sum_) /= static_cast<float>(count());
  tensor average = std::move(sum_);
  sum_ = tensor{shape_};
  close_round();
  return average;
}

void conditional_accumulator::discard() {
  as_array(sum_).setZero();
  reset_round();
}

} // namespace syncfac
