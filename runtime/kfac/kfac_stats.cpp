#include "runtime/kfac/kfac_stats.hpp"

#include <algorithm>

#include "runtime/error.hpp"

namespace syncfac {

caf::expected<std::vector<layer_stats>>
layer_statistics(const std::vector<kfac_view>& views,
                 const cpu::factor_sampling& s, int threads) {
  std::vector<layer_stats> result;
  result.reserve(views.size());
  for (const auto& v : views) {
    if (v.input == nullptr || v.preactivation_grad == nullptr)
      return make_error(ec::invalid_argument,
                        "kfac: no statistics for layer '" + v.layer
                          + "' (run a backward pass first)");
    layer_stats st;
    st.layer = v.layer;
    auto err = v.kind == layer_kind::conv2d
                 ? cpu::conv_factors(v.geometry, *v.input,
                                     *v.preactivation_grad, true, s, threads,
                                     st.a, st.g)
                 : cpu::dense_factors(*v.input, *v.preactivation_grad, true,
                                      s, threads, st.a, st.g);
    if (err)
      return with_context(err, "kfac: statistics of layer '" + v.layer + "'");
    result.push_back(std::move(st));
  }
  return result;
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
  return result;
}

} // namespace syncfac
