#include "runtime/sync/sparse_accumulator.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <Eigen/Core>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

using row_map = Eigen::Map<Eigen::ArrayXf>;
using const_row_map = Eigen::Map<const Eigen::ArrayXf>;

const tensor_shape& require_rows(const tensor_shape& shape) {
  if (shape.empty())
    throw std::invalid_argument("a sparse accumulator needs a variable of "
                                "rank >= 1, got shape []");
  return shape;
}

std::string at(int64_t index, size_t position) {
  return "index " + std::to_string(index) + " at position "
         + std::to_string(position);
}

} // namespace

sparse_accumulator::sparse_accumulator(std::string variable,
                                       tensor_shape shape)
  : accumulator_ledger(std::move(variable)),
    shape_(require_rows(shape)),
    row_size_(element_count(rows_shape(1))),
    sum_(shape_),
    hits_(static_cast<size_t>(shape_[0]), 0) {
  touched_.reserve(static_cast<size_t>(shape_[0]));
}

tensor_shape sparse_accumulator::rows_shape(int64_t k) const {
  auto result = shape_;
  result[0] = k;
  return result;
}

std::optional<gradient_problem> sparse_accumulator::check_indices(
  const std::vector<int64_t>& indices) const {
  const auto n = shape_[0];
  for (size_t i = 0; i < indices.size(); ++i) {
    auto index = indices[i];
    if (index < 0 || index >= n)
      return gradient_problem{ec::invalid_argument,
                              at(index, i) + " is out of range [0, "
                                + std::to_string(n) + ")"};
    // One rule for repeats and disorder: TF's sparse apply assumes both
    // away, and a sender that breaks either has the same bug.
    if (i > 0 && index <= indices[i - 1])
      return gradient_problem{ec::invalid_argument,
                              at(index, i) + " follows index "
                                + std::to_string(indices[i - 1])
                                + ": indices must be strictly increasing"};
  }
  return std::nullopt;
}

std::optional<gradient_problem>
sparse_accumulator::check_finite(const std::vector<int64_t>& indices,
                                 const tensor& rows) const {
  if (rows.all_finite())
    return std::nullopt;
  auto bad = detail::first_non_finite(rows.data(), rows.size());
  auto position = static_cast<size_t>(bad / row_size_);
  return gradient_problem{ec::non_finite,
                          "row for " + at(indices[position], position)
                            + " holds NaN or Inf"};
}

std::optional<gradient_problem>
sparse_accumulator::check(const std::vector<int64_t>& indices,
                          const tensor& rows) const {
  auto expected = rows_shape(static_cast<int64_t>(indices.size()));
  if (!detail::has_shape(rows, expected))
    return gradient_problem{ec::shape_mismatch,
                            std::to_string(indices.size())
                              + " indices need rows of shape "
                              + to_string(expected) + ", got "
                              + detail::describe(rows)};
  if (auto problem = check_indices(indices))
    return problem;
  return check_finite(indices, rows);
}

void sparse_accumulator::add(const std::vector<int64_t>& indices,
                             const tensor& rows) {
  const auto len = static_cast<Eigen::Index>(row_size_);
  for (size_t i = 0; i < indices.size(); ++i) {
    auto row = indices[i];
    row_map{sum_.data() + row * row_size_, len}
      += const_row_map{rows.data() + static_cast<int64_t>(i) * row_size_, len};
    if (hits_[static_cast<size_t>(row)]++ == 0)
      touched_.push_back(row);
  }
}

caf::expected<bool> sparse_accumulator::apply(
  int64_t local_step, const std::vector<int64_t>& indices,
  const tensor& rows) {
  // Checked before the staleness rule, as the dense accumulator does:
  // a malformed push is a bug of its sender, worth reporting even late.
  if (auto problem = check(indices, rows))
    return refuse(make_error(problem->code, context(problem->what)));
  return apply_checked(local_step, indices, rows);
}

bool sparse_accumulator::apply_checked(int64_t local_step,
                                       const std::vector<int64_t>& indices,
                                       const tensor& rows) {
  if (!admit(local_step))
    return false;
  add(indices, rows);
  return true;
}

void sparse_accumulator::discard() {
  const auto len = static_cast<Eigen::Index>(row_size_);
  for (auto row : touched_) {
    row_map{sum_.data() + row * row_size_, len}.setZero();
    hits_[static_cast<size_t>(row)] = 0;
  }
  touched_.clear();
  reset_round();
}

caf::expected<double>
sparse_accumulator::average_sum_of_squares(int64_t n) const {
  if (auto err = check_take(n))
    return err;
  // The very floats take() divides out, row by row.
  double result = 0;
  for (auto row : touched_) {
    const auto hits = static_cast<float>(hits_[static_cast<size_t>(row)]);
    const float* sum = sum_.data() + row * row_size_;
    for (int64_t j = 0; j < row_size_; ++j) {
      float average = sum[j] / hits;
      result += static_cast<double>(average) * average;
    }
  }
  return result;
}

caf::expected<sparse_gradient> sparse_accumulator::take(int64_t n) {
  if (auto err = check_take(n))
    return err;
  std::sort(touched_.begin(), touched_.end());
  sparse_gradient result;
  result.rows = tensor{rows_shape(touched_rows())};
  const auto len = static_cast<Eigen::Index>(row_size_);
  for (size_t i = 0; i < touched_.size(); ++i) {
    auto row = touched_[i];
    row_map sum{sum_.data() + row * row_size_, len};
    auto& hits = hits_[static_cast<size_t>(row)];
    row_map{result.rows.data() + static_cast<int64_t>(i) * row_size_, len}
      = sum / static_cast<float>(hits);
    sum.setZero();
    hits = 0;
  }
  // A copy, not a move: touched_ keeps its reserved capacity.
  result.indices = touched_;
  touched_.clear();
  close_round();
  return result;
}

} // namespace syncfac
