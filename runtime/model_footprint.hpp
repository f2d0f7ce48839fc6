#pragma once

// The memory a model needs, computed from its description alone before
// anything is built (docs/robustness.md, "Sizes before allocation"): every
// product with overflow-safe arithmetic, so that a typo'd size is refused
// by name instead of wrapping past a check or ending in std::bad_alloc.

#include <cstdint>
#include <string>

#include <caf/expected.hpp>

#include "runtime/model_description.hpp"
#include "runtime/model_spec.hpp"

namespace syncfac {

/// Element counts (floats) of a described model.
struct model_footprint {
  /// Every weight and bias.
  uint64_t parameters = 0;
  /// The input and every layer's output, for one example.
  uint64_t activations_per_example = 0;
  /// K-FAC's two factors of every dense and conv2d layer: (a + 1)^2 + g^2
  /// (saturating at UINT64_MAX: they count only under K-FAC).
  uint64_t factor_elements = 0;
  /// The layer with the most parameters, as layer_label names it, and
  /// their count ("" and 0 for a model without any).
  std::string largest_layer;
  uint64_t largest_parameters = 0;
};

/// The footprint of `desc`; ec::invalid_config naming `source`, the layer,
/// its fields and the figure when a count does not fit in 63 bits. Shapes
/// that do not chain end the measure where they stop chaining (model::make
/// names that mismatch, and builds nothing past it).
caf::expected<model_footprint> measure_model(const model_description& desc,
                                             const std::string& source);

/// What one run in this process holds, in bytes (saturating at
/// UINT64_MAX): `replicas` model replicas (values, gradients and an
/// optimizer slot each) with the activations and their gradients of
/// `batch` examples, the PS's copy with its average and optimizer slots,
/// K-FAC's factors, inverses and a workspace when `kfac`.
uint64_t run_bytes(const model_footprint& fp, uint64_t replicas,
                   uint64_t batch, bool kfac);

/// What model::make holds while it builds the model: the parameters and
/// one layer's temporary copies (K-FAC's registration).
uint64_t build_bytes(const model_footprint& fp);

/// The footprint of `desc` checked against the memory this process may
/// use (runtime/host_limits.hpp) for model::make: refused naming `source`,
/// the largest layer, the figure and the limit.
caf::error check_model_buildable(const model_description& desc,
                                 const std::string& source);

/// What a run in this process needs: `replicas` device actors (each a
/// thread of its own, with `compute_threads` compute threads in all) of
/// the model of `spec` on `batch` examples each, with K-FAC's factors when
/// `kfac`. Checked against the memory and the threads this process may
/// use (runtime/host_limits.hpp); refused naming `replicas_flag`
/// ("--worker_replicas 100000"), the figure and the limit.
caf::error check_local_run(const model_spec& spec, uint64_t replicas,
                           uint64_t batch, bool kfac,
                           uint64_t compute_threads,
                           const std::string& replicas_flag);

} // namespace syncfac
