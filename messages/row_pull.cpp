#include "messages/row_pull.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

/// Elements of one row of a table of this shape (1 for a rank-1 table).
int64_t row_size(const tensor_shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i)
    n *= shape[i];
  return n;
}

} // namespace

caf::error check_row_ids(const std::string& variable,
                         const std::vector<int64_t>& ids, int64_t rows) {
  for (size_t i = 0; i < ids.size(); ++i) {
    auto id = ids[i];
    if (id < 0 || id >= rows)
      return make_error(ec::invalid_argument,
                        "variable " + in_quotes(variable) + ": row id "
                          + std::to_string(id) + " (#" + std::to_string(i)
                          + ") is out of range: the table has "
                          + std::to_string(rows) + " rows");
    // One rule for repeats and disorder, as for a sparse push's indices.
    if (i > 0 && id <= ids[i - 1])
      return make_error(ec::invalid_argument,
                        "variable " + in_quotes(variable) + ": row id "
                          + std::to_string(id) + " (#" + std::to_string(i)
                          + ") follows row id " + std::to_string(ids[i - 1])
                          + ": row ids must be strictly increasing");
  }
  return caf::none;
}

std::optional<std::string> looked_up_table(const model_description& desc) {
  if (desc.layers.empty()
      || desc.layers.front().type != layer_type::embedding_bag)
    return std::nullopt;
  return layer_names(desc).front() + "/embeddings";
}

std::vector<int64_t> rows_looked_up(const tensor& inputs) {
  std::vector<int64_t> rows;
  const float* x = inputs.data();
  const auto n = inputs.size();
  rows.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto v = x[i];
    // Padding, and what the device refuses as no row id.
    if (!(v >= 0.0f) || v != std::floor(v) || v > 9.0e18f)
      continue;
    rows.push_back(static_cast<int64_t>(v));
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

caf::expected<sparse_update> gather_rows(const named_tensor& table,
                                         const std::vector<int64_t>& rows) {
  const auto& shape = table.value.shape();
  if (shape.empty())
    return make_error(ec::invalid_argument,
                      "variable " + in_quotes(table.name)
                        + " is a scalar: it has no rows to pull");
  if (auto err = check_row_ids(table.name, rows, shape[0]))
    return err;
  auto out_shape = shape;
  out_shape[0] = static_cast<int64_t>(rows.size());
  sparse_update result{table.name, rows, tensor{out_shape}};
  const auto width = row_size(shape);
  const float* src = table.value.data();
  float* dst = result.rows.data();
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dst + static_cast<int64_t>(i) * width, src + rows[i] * width,
                static_cast<size_t>(width) * sizeof(float));
  return result;
}

caf::error scatter_rows(const sparse_update& update, tensor& table) {
  const auto& shape = table.shape();
  if (shape.empty())
    return make_error(ec::shape_mismatch,
                      "variable " + in_quotes(update.variable)
                        + " is a scalar: it takes no rows");
  if (auto err = check_row_ids(update.variable, update.indices, shape[0]))
    return err;
  auto expected = shape;
  expected[0] = static_cast<int64_t>(update.indices.size());
  if (update.rows.shape() != expected
      || update.rows.size() != element_count(expected))
    return make_error(ec::shape_mismatch,
                      "variable " + in_quotes(update.variable) + ": "
                        + std::to_string(update.indices.size())
                        + " row ids need rows of shape " + to_string(expected)
                        + ", got " + to_string(update.rows.shape()));
  const auto width = row_size(shape);
  const float* src = update.rows.data();
  float* dst = table.data();
  for (size_t i = 0; i < update.indices.size(); ++i)
    std::memcpy(dst + update.indices[i] * width,
                src + static_cast<int64_t>(i) * width,
                static_cast<size_t>(width) * sizeof(float));
  return caf::none;
}

int64_t payload_bytes(const sparse_update& update) {
  return static_cast<int64_t>(update.indices.size() * sizeof(int64_t))
         + update.rows.size() * static_cast<int64_t>(sizeof(float));
}

} // namespace syncfac
