#pragma once

// One K-FAC optimizer step on a set of variables: what a PS shard does with
// the averaged gradient, and the device's single-process K-FAC likewise
// (docs/design.md §3). Per layer with an inverse, the gradient matrix
// [a_dim, g_dim] (weight rows, bias row last) is preconditioned as
// G⁻¹ ∇W A⁻¹; layers without an inverse yet, and variables that belong to
// no layer, take plain momentum. Momentum as kfac_config::momentum says:
//   adam:    v ← μv + ∇;  u = F̂⁻¹v;  θ ← θ − η·c·u
//   regular: u = F̂⁻¹∇;   v ← μv + c·u;  θ ← θ − η·v
// with c = min(1, √(kl_clip / (η² Σ⟨·, F̂⁻¹·⟩))) over the preconditioned
// layers (1 without a clip). ∇ is the averaged gradient times the
// optimizer's gradient_scale (--clip_norm's factor, before the
// preconditioning) plus the L2 penalty's gradient. Variables marked left out (a PS shard's
// embedding tables, whose gradients come as rows) are not touched: the
// caller gives them the first-order update (docs/models.md).

#include <cstddef>
#include <vector>

#include <caf/expected.hpp>

#include "kernels/kfac_inverter.hpp"
#include "runtime/kfac/kfac_data.hpp"
#include "runtime/named_tensor.hpp"
#include "runtime/optimizer.hpp"

namespace syncfac {

/// A layer among the variables being updated, and its inverse if any.
struct kfac_layer_slot {
  /// Indices of the layer's weight and bias among the variables.
  size_t weight = 0;
  size_t bias = 0;
  /// Null: no inverse yet (plain momentum for this layer).
  const layer_inverse* inverse = nullptr;
};

struct kfac_step_info {
  /// Σ⟨·, F̂⁻¹·⟩ over the preconditioned layers, and the clip factor c.
  double dot = 0;
  double scale = 1;
  /// Layers preconditioned this step.
  size_t preconditioned = 0;
};

/// Applies one step to `params` with `grads` (index-aligned, shapes
/// checked by the caller) through `opt` (kind kfac, made for `params`),
/// the preconditioning products on `kernels`' device (the momentum and the
/// update on the host). Errors name the layer; nothing is half-applied on
/// an error of the preconditioning (which runs before any variable
/// changes). left_out: empty, or one flag per variable; a flagged
/// variable (which no layer may hold) keeps its value and slots, and its
/// entry of grads is not read. threads: the layers' products run side by
/// side on up to this many threads when `kernels` allows concurrent calls
/// (each product on one thread, the largest layers first); the result is
/// the same for every thread count.
caf::expected<kfac_step_info>
kfac_apply(optimizer& opt, parameter_set& params,
           const std::vector<tensor>& grads,
           const std::vector<kfac_layer_slot>& layers,
           kfac_inverter& kernels, const std::vector<bool>& left_out = {},
           int threads = 1);

/// kfac_apply with the preconditioning on the CPU (a PS shard's).
caf::expected<kfac_step_info>
kfac_apply(optimizer& opt, parameter_set& params,
           const std::vector<tensor>& grads,
           const std::vector<kfac_layer_slot>& layers,
           const std::vector<bool>& left_out = {});

/// A layer's gradient matrix [rows + 1, out] from its weight [..., out]
/// and bias [out], and back.
tensor layer_matrix(const tensor& weight, const tensor& bias);
void split_layer_matrix(const tensor& m, tensor& weight, tensor& bias);

} // namespace syncfac
