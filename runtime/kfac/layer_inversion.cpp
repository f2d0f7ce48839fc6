#include "runtime/kfac/layer_inversion.hpp"

#include <cmath>
#include <utility>

#include "kernels/cpu/kfac_inverse.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

bool square(const tensor& t, int64_t n) {
  return t.shape().size() == 2 && t.shape()[0] == n && t.shape()[1] == n;
}

bool all_finite(const tensor& t) {
  for (int64_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t[i]))
      return false;
  return true;
}

caf::error check_factors(const layer_factors& f) {
  auto bad = [&](const std::string& what) {
    return make_error(ec::bad_message,
                      "factors of layer '" + f.layer + "': " + what);
  };
  if (f.a.shape().size() != 2 || !square(f.a, f.a.shape()[0]))
    return bad("A must be square, got " + to_string(f.a.shape()));
  if (f.g.shape().size() != 2 || !square(f.g, f.g.shape()[0]))
    return bad("G must be square, got " + to_string(f.g.shape()));
  if (f.locations < 1)
    return bad("locations must be >= 1, got " + std::to_string(f.locations));
  if (!all_finite(f.a) || !all_finite(f.g))
    return make_error(ec::non_finite, "factors of layer '" + f.layer
                                        + "' hold NaN or Inf");
  return caf::none;
}

} // namespace

caf::expected<layer_inverse> invert_layer(const layer_factors& f,
                                          const kfac_config& cfg,
                                          kfac_inverter& inverter,
                                          bool& damping_raised) {
  damping_raised = false;
  if (f.cov_updates < cfg.min_cov_updates)
    return make_error(ec::invalid_argument,
                      "layer '" + f.layer + "': only "
                        + std::to_string(f.cov_updates)
                        + " covariance updates, need "
                        + std::to_string(cfg.min_cov_updates)
                        + " before inverting");
  if (auto err = check_factors(f))
    return err;
  layer_inverse result;
  result.layer = f.layer;
  result.mode = cfg.mode;
  result.locations = f.locations;
  result.damping = cfg.damping;
  auto context = "layer '" + f.layer + "'";
  if (cfg.mode == inverse_mode::eigen) {
    if (auto err = inverter.symmetric_eigen(f.a, result.a_values, result.a))
      return with_context(err, context + ", factor A");
    if (auto err = inverter.symmetric_eigen(f.g, result.g_values, result.g))
      return with_context(err, context + ", factor G");
    return result;
  }
  auto plan = cpu::factored_damping(f.a, f.g, cfg.damping, f.locations);
  bool explicit_inverses = cfg.mode == inverse_mode::explicit_inverse;
  result.form = explicit_inverses ? inverse_form::inverse
                                  : inverse_form::cholesky_factor;
  // Inverses for bfloat16 products need only float precision.
  bool in_float = cfg.precision == product_precision::bf16;
  auto damped = [&](const tensor& factor, float damping, tensor& out) {
    if (!explicit_inverses)
      return inverter.damped_cholesky_with_retry(
        factor, damping, cfg.max_damping_retries, out);
    return in_float ? inverter.damped_inverse_f32_with_retry(
                        factor, damping, cfg.max_damping_retries, out)
                    : inverter.damped_inverse_with_retry(
                        factor, damping, cfg.max_damping_retries, out);
  };
  auto da = damped(f.a, plan.a_damping, result.a);
  if (!da)
    return with_context(da.error(), context + ", factor A");
  auto dg = damped(f.g, plan.g_damping, result.g);
  if (!dg)
    return with_context(dg.error(), context + ", factor G");
  result.a_damping = *da;
  result.g_damping = *dg;
  damping_raised = *da > plan.a_damping || *dg > plan.g_damping;
  return result;
}

caf::expected<layer_inverse> invert_layer(const layer_factors& f,
                                          const kfac_config& cfg,
                                          bool& damping_raised) {
  return invert_layer(f, cfg, cpu_kfac_inverter(), damping_raised);
}

inverse_set invert_factors(const factor_set& factors, const kfac_config& cfg,
                           kfac_inverter& inverter) {
  inverse_set result;
  result.step = factors.step;
  for (const auto& f : factors.layers) {
    bool raised = false;
    auto inv = invert_layer(f, cfg, inverter, raised);
    if (!inv) {
      result.problems.push_back(render(inv.error()));
      continue;
    }
    result.damping_raised += raised ? 1 : 0;
    result.layers.push_back(std::move(*inv));
  }
  return result;
}

inverse_set invert_factors(const factor_set& factors, const kfac_config& cfg) {
  return invert_factors(factors, cfg, cpu_kfac_inverter());
}

caf::error check_inverse(const layer_inverse& inv, int64_t a_dim,
                         int64_t g_dim) {
  auto bad = [&](const std::string& what) {
    return make_error(ec::bad_message,
                      "inverse of layer '" + inv.layer + "': " + what);
  };
  if (!square(inv.a, a_dim))
    return bad("A part must be " + std::to_string(a_dim) + "x"
               + std::to_string(a_dim) + ", got " + to_string(inv.a.shape()));
  if (!square(inv.g, g_dim))
    return bad("G part must be " + std::to_string(g_dim) + "x"
               + std::to_string(g_dim) + ", got " + to_string(inv.g.shape()));
  if (inv.locations < 1)
    return bad("locations must be >= 1");
  if (inv.mode == inverse_mode::eigen
      && (inv.a_values.size() != a_dim || inv.g_values.size() != g_dim))
    return bad("eigenvalue counts " + std::to_string(inv.a_values.size())
               + " and " + std::to_string(inv.g_values.size())
               + " do not match the factor sizes");
  if (!std::isfinite(inv.damping) || inv.damping < 0)
    return bad("damping must be finite and >= 0");
  if (!all_finite(inv.a) || !all_finite(inv.g) || !all_finite(inv.a_values)
      || !all_finite(inv.g_values))
    return make_error(ec::non_finite, "inverse of layer '" + inv.layer
                                        + "' holds NaN or Inf");
  return caf::none;
}

caf::expected<double> precondition_layer(const layer_inverse& inv,
                                         const tensor& grad, tensor& out,
                                         kfac_inverter& kernels,
                                         product_precision precision) {
  tensor result;
  auto scale = 1.0f / static_cast<float>(inv.locations);
  caf::error err;
  if (inv.mode == inverse_mode::eigen)
    err = kernels.precondition_eigen(grad, inv.a, inv.a_values, inv.g,
                                     inv.g_values, inv.damping,
                                     inv.locations, result,
                                     cpu::factor_scan::trusted);
  else if (inv.form == inverse_form::cholesky_factor)
    err = kernels.precondition_cholesky(grad, inv.a, inv.g, scale, result,
                                        cpu::factor_scan::trusted);
  else if (precision == product_precision::bf16)
    err = kernels.precondition_factored_bf16(grad, inv.a, inv.g, scale,
                                             result);
  else
    err = kernels.precondition_factored(grad, inv.a, inv.g, scale, result);
  if (err)
    return with_context(err, "layer '" + inv.layer + "'");
  // In vector lanes (the order is fixed by the build, not the threads).
  const float* x = grad.data();
  const float* y = std::as_const(result).data();
  const int64_t n = grad.size();
  double dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < n; ++i)
    dot += static_cast<double>(x[i]) * static_cast<double>(y[i]);
  out = std::move(result);
  return dot;
}

caf::expected<double> precondition_layer(const layer_inverse& inv,
                                         const tensor& grad, tensor& out,
                                         product_precision precision) {
  return precondition_layer(inv, grad, out, cpu_kfac_inverter(), precision);
}

} // namespace syncfac
