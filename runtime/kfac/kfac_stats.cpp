#include "runtime/kfac/kfac_stats.hpp"

#include <algorithm>

#include "kernels/cpu/parallel.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

// Rows of the layer's factors under s (examples, times locations of a
// conv layer).
int64_t factor_rows(const kfac_view& v, const factor_sampling& s) {
  const auto& x = *v.input;
  auto batch = x.rank() > 0 ? x.dim(0) : 0;
  auto locations = v.kind == layer_kind::conv2d ? v.geometry.locations() : 1;
  return cpu::sampled_row_count(s, batch, locations);
}

// Width of the layer's input factor (the larger one).
int64_t factor_width(const kfac_view& v) {
  return v.kind == layer_kind::conv2d
           ? v.geometry.patch_size()
           : (v.input->rank() == 2 ? v.input->dim(1) : 0);
}

caf::error one_layer(const kfac_view& v, const factor_sampling& s,
                     int threads, bool rows, kfac_inverter& kernels,
                     layer_stats& st) {
  st.layer = v.layer;
  caf::error err;
  if (rows)
    err = v.kind == layer_kind::conv2d
            ? kernels.conv_factors(v.geometry, *v.input,
                                   *v.preactivation_grad, true, s, threads,
                                   st.a, st.g, st.a_rows, st.g_rows)
            : kernels.dense_factors(*v.input, *v.preactivation_grad, true, s,
                                    threads, st.a, st.g, st.a_rows,
                                    st.g_rows);
  else
    err = v.kind == layer_kind::conv2d
            ? kernels.conv_factors(v.geometry, *v.input,
                                   *v.preactivation_grad, true, s, threads,
                                   st.a, st.g)
            : kernels.dense_factors(*v.input, *v.preactivation_grad, true, s,
                                    threads, st.a, st.g);
  if (err)
    return with_context(err, "kfac: statistics of layer '" + v.layer + "'");
  return caf::none;
}

} // namespace

caf::expected<std::vector<layer_stats>>
layer_statistics(const std::vector<kfac_view>& views,
                 const factor_sampling& s, int threads, bool rows,
                 kfac_inverter& kernels) {
  for (const auto& v : views)
    if (v.input == nullptr || v.preactivation_grad == nullptr)
      return make_error(ec::invalid_argument,
                        "kfac: no statistics for layer '" + v.layer
                          + "' (run a backward pass first)");
  std::vector<layer_stats> result(views.size());
  // Sub-sampled statistics (few rows per factor) run a layer per thread,
  // largest first: one parallel region instead of two per factor. The
  // factors do not depend on the thread count, so neither does the result.
  // Only for kernels that take concurrent calls: a GPU's take turns.
  bool few = threads > 1 && views.size() > 1 && kernels.concurrent();
  for (const auto& v : views)
    few = few && factor_rows(v, s) <= cpu::few_factor_rows;
  if (!few) {
    for (size_t i = 0; i < views.size(); ++i)
      if (auto err = one_layer(views[i], s, threads, rows, kernels,
                               result[i]))
        return err;
    return result;
  }
  std::vector<size_t> order(views.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return factor_width(views[a]) > factor_width(views[b]);
  });
  std::vector<caf::error> errors(views.size());
  cpu::parallel_for(threads, static_cast<int64_t>(order.size()),
                    [&](int64_t k, int) {
                      auto i = order[static_cast<size_t>(k)];
                      errors[i] = one_layer(views[i], s, 1, rows, kernels,
                                            result[i]);
                    });
  for (auto& err : errors)
    if (err)
      return std::move(err);
  return result;
}

caf::expected<std::vector<layer_stats>>
layer_statistics(const std::vector<kfac_view>& views,
                 const factor_sampling& s, int threads, bool rows) {
  return layer_statistics(views, s, threads, rows, cpu_kfac_inverter());
}

batch batch_prefix(const batch& b, int64_t n) {
  auto total = static_cast<int64_t>(b.labels.size());
  if (n <= 0 || n >= total)
    return b;
  batch result;
  auto shape = b.images.shape();
  auto per_example = total > 0 ? b.images.size() / total : 0;
  shape[0] = n;
  result.images = tensor(shape);
  std::copy(b.images.data(), b.images.data() + n * per_example,
            result.images.data());
  result.labels.assign(b.labels.begin(), b.labels.begin() + n);
  // The same seed: a dropout mask indexes the batch's elements in order,
  // so the prefix's examples draw the masks they drew in the whole batch.
  result.noise_seed = b.noise_seed;
  return result;
}

} // namespace syncfac
