#pragma once

// The inverse side of K-FAC for one set of factors: what an inverse actor's
// device computes (docs/design.md §3). Per layer, Cholesky inverses of
// (A + π√(λ/T) I) and (G + π⁻¹√(λ/T) I), or eigendecompositions for exact
// damping in the eigenbasis; and the preconditioning of one layer's
// gradient matrix with such an inverse. The factorisations and the
// preconditioning products run on the device of the kfac_inverter given
// (kernels/kfac_inverter.hpp); the overloads without one use the CPU.

#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/kfac_inverter.hpp"
#include "runtime/kfac/kfac_data.hpp"

namespace syncfac {

/// Inverts every layer of `factors` with at least cfg.min_cov_updates
/// covariance updates. A layer with fewer, with malformed or non-finite
/// factors, or that fails even after cfg.max_damping_retries damping
/// increases is left out and named in problems (its previous inverse stays
/// in use wherever it is); one needing more damping counts in
/// damping_raised. Never an error for the whole set: one bad layer must
/// not stop the others.
inverse_set invert_factors(const factor_set& factors, const kfac_config& cfg,
                           kfac_inverter& inverter);

/// invert_factors on the CPU.
inverse_set invert_factors(const factor_set& factors, const kfac_config& cfg);

/// One layer: the same rules, the reason as an error.
caf::expected<layer_inverse> invert_layer(const layer_factors& factors,
                                          const kfac_config& cfg,
                                          kfac_inverter& inverter,
                                          bool& damping_raised);

/// invert_layer on the CPU.
caf::expected<layer_inverse> invert_layer(const layer_factors& factors,
                                          const kfac_config& cfg,
                                          bool& damping_raised);

/// ec::bad_message naming the layer unless `inv` fits a layer with factor
/// shapes a_dim x a_dim and g_dim x g_dim (and, in eigen mode, eigenvalue
/// vectors of a_dim and g_dim) with finite values and positive locations.
caf::error check_inverse(const layer_inverse& inv, int64_t a_dim,
                         int64_t g_dim);

/// out = F̂⁻¹ grad for the layer's gradient matrix grad [a_dim, g_dim]
/// (bias row last): A⁻¹ grad G⁻¹ / T (Cholesky mode) or the exact damped
/// solve in the eigenbasis; returns ⟨grad, out⟩ for the KL clip. out may
/// alias grad. `inv` must have passed check_inverse (its holder checks it
/// once, when it arrives): only grad is scanned for NaN or Inf here, on
/// every step. The product runs on `kernels`' device; the dot on the host.
/// `precision` bf16 applies to explicit inverses (kfac_config::validate
/// allows it with those only).
caf::expected<double>
precondition_layer(const layer_inverse& inv, const tensor& grad, tensor& out,
                   kfac_inverter& kernels,
                   product_precision precision = product_precision::fp32);

/// precondition_layer on the CPU.
caf::expected<double>
precondition_layer(const layer_inverse& inv, const tensor& grad, tensor& out,
                   product_precision precision = product_precision::fp32);

} // namespace syncfac
