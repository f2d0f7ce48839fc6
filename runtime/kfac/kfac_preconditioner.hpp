#pragma once

// K-FAC's preconditioner for the layers of one model: the exponential
// moving averages of each layer's Kronecker factors A and G, their damped
// inverses (or eigendecompositions), and the preconditioned gradient
// F̂⁻¹∇ = G⁻¹ ∇W A⁻¹ per layer (docs/design.md §3). A layer's gradient is seen
// as the matrix [in+1, out] (a conv kernel as [kh·kw·C + 1, out]) whose
// last row is the bias, matching A's last row and column.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/kfac_types.hpp"
#include "runtime/inspect.hpp"
#include "runtime/kfac/layer_collection.hpp"
#include "runtime/layers.hpp"
#include "runtime/named_tensor.hpp"

namespace syncfac {

class kfac_inverter;
struct layer_stats;
struct layer_inverse;
struct kfac_layer_slot;

enum class fisher_type : uint8_t {
  /// Targets drawn from the model's predictive distribution (the true
  /// Fisher; the seeds' default).
  sampled,
  /// The data labels (the empirical Fisher).
  empirical,
};

enum class inverse_mode : uint8_t {
  /// Cholesky inverses of the factors with factored Tikhonov damping.
  cholesky,
  /// Eigendecompositions, exact damping in the eigenbasis.
  eigen,
  /// cholesky's factored damping, the damped inverses formed explicitly
  /// (in double, from the Cholesky factorisation): preconditioning is two
  /// GEMMs, at the CPU's widest level, instead of four triangular solves,
  /// which pays for layers with many outputs (1.8x on the autoencoder's
  /// [1001, 784] layer) at ~6x the inversion work every invert_every
  /// steps (docs/benchmarks-history.md, "K-FAC's wall time on the autoencoder").
  explicit_inverse,
};

/// The precision of the preconditioning products under
/// inverse_mode::explicit_inverse.
enum class product_precision : uint8_t {
  /// float inputs and sums.
  fp32,
  /// Inputs rounded to bfloat16, float sums, on the CPU's AMX tiles or
  /// AVX512-BF16 (kernels/cpu/bf16_gemm.hpp): ~3x the products' fp32 rate
  /// on the autoencoder's layers on AMX, ~1.8x on AVX512-BF16 (Zen 4),
  /// with ~3 significant digits of the gradient and the inverses, which
  /// approximate curvature anyway (docs/benchmarks-history.md, "K-FAC's
  /// wall time on the autoencoder"; docs/kernels.md, "bfloat16 products").
  bf16,
};

/// Where momentum sits relative to the preconditioner (TF KfacOptimizer's
/// momentum_type).
enum class kfac_momentum : uint8_t {
  /// v ← μv + ∇; θ ← θ − η·F̂⁻¹v (docs/design.md §3).
  adam,
  /// v ← μv + F̂⁻¹∇; θ ← θ − η·v: TF's "regular", the default of the
  /// KfacOptimizer the seeds build (they pass only momentum = 0.9), so the
  /// default here too.
  regular,
};

/// When the sync runtime's covariance actors fold statistics and hand the
/// factors to the inverse actors.
enum class kfac_cadence : uint8_t {
  /// A worker never waits for its statistics (a busy covariance actor
  /// skips them, counted), and every invert_every-th covariance update
  /// hands the factors on: the gradient path never waits for K-FAC.
  counted,
  /// The seeds' distributed example exactly: the statistics of every step
  /// are folded (the step's push waits for them, as the seeds' chief
  /// worker runs cov_update_op in its step), and the factors go to the
  /// inverses after the update of global step s with
  /// (s + 1) % invert_every == 0.
  exact,
};

const char* to_string(fisher_type x) noexcept;
const char* to_string(inverse_mode x) noexcept;
const char* to_string(kfac_momentum x) noexcept;
const char* to_string(kfac_cadence x) noexcept;
const char* to_string(product_precision x) noexcept;
caf::expected<fisher_type> parse_fisher_type(const std::string& str);
caf::expected<inverse_mode> parse_inverse_mode(const std::string& str);
caf::expected<kfac_momentum> parse_kfac_momentum(const std::string& str);
caf::expected<kfac_cadence> parse_kfac_cadence(const std::string& str);
caf::expected<product_precision>
parse_product_precision(const std::string& str);

struct kfac_config {
  float cov_ema_decay = 0.95f;
  float damping = 1e-3f;
  /// Inverses are recomputed every this many steps.
  int64_t invert_every = 10;
  /// The plain runtime folds statistics into the factors on every this
  /// many-th step only (the seeds' cov_update_every; steps 0, k, 2k, ...):
  /// the statistics pass (a sampled backward and the Gram matrices) is a
  /// third of a K-FAC step, and the factors' moving average changes slowly
  /// (docs/benchmarks-history.md, issue 24 item 5). The sync runtime folds every
  /// step's statistics it gets (its cadence below) and refuses other values.
  int64_t stats_every = 1;
  /// No inverse before this many covariance updates: inverting too early
  /// is the seeds' "Cholesky decomposition was not successful".
  int64_t min_cov_updates = 1;
  fisher_type fisher = fisher_type::sampled;
  inverse_mode mode = inverse_mode::cholesky;
  /// The preconditioning products' precision; bf16 needs the explicit
  /// inverses (the products are then two plain GEMMs).
  product_precision precision = product_precision::fp32;
  /// KL / norm clip of the step (0: none).
  float kl_clip = 0;
  kfac_momentum momentum = kfac_momentum::regular;
  /// The sync runtime's statistics and inversion cadence (the plain
  /// runtime inverts after step s with (s + 1) % invert_every == 0, the
  /// seeds' single-process cadence, either way).
  kfac_cadence cadence = kfac_cadence::counted;
  /// Damping increases (x10 each) tried when a factor fails to invert.
  int max_damping_retries = 4;
  /// Sub-sampling of examples and locations for the statistics.
  factor_sampling sampling;

  caf::error validate() const;
};

SYNCFAC_INSPECT(kfac_config, x.cov_ema_decay, x.damping, x.invert_every,
                x.stats_every, x.min_cov_updates, x.fisher, x.mode,
                x.precision, x.kl_clip, x.momentum, x.cadence,
                x.max_damping_retries, x.sampling.max_examples,
                x.sampling.max_locations, x.sampling.seed)

class kfac_preconditioner {
public:
  /// A preconditioner for the layers in `views` whose parameters are in
  /// `params` (names as in the views).
  static caf::expected<kfac_preconditioner>
  make(const kfac_config& cfg, const std::vector<kfac_view>& views,
       const parameter_set& params);

  /// A preconditioner for the layers of a layer collection.
  static caf::expected<kfac_preconditioner>
  make(const kfac_config& cfg, const std::vector<kfac_layer>& layers,
       const parameter_set& params);

  /// Folds one batch's statistics (from views valid after a backward pass
  /// under the chosen Fisher), computed by `kernels`, into the moving
  /// averages (on the host).
  caf::error update_factors(const std::vector<kfac_view>& views,
                            int threads, kfac_inverter& kernels);

  /// update_factors with the statistics computed on the CPU.
  caf::error update_factors(const std::vector<kfac_view>& views,
                            int threads);

  /// The same from statistics already computed (one entry per layer, in
  /// layer order, as runtime/kfac/kfac_stats.hpp makes them).
  caf::error update_factors(const std::vector<layer_stats>& stats);

  /// Recomputes the inverses of every layer with enough covariance
  /// updates. A factor that still fails after the damping retries keeps
  /// its previous inverse; the error is returned for reporting. The
  /// factorisations run on `inverter`'s device, the layers side by side on
  /// up to `threads` threads when it allows concurrent calls (the same
  /// inverses for every thread count).
  caf::error update_inverses(kfac_inverter& inverter, int threads = 1);

  /// update_inverses on the CPU.
  caf::error update_inverses();

  /// Replaces the gradient of every layer that has an inverse by F̂⁻¹∇
  /// (others stay plain: momentum until the first inverse) and returns
  /// Σ ⟨∇, F̂⁻¹∇⟩ over the preconditioned layers (for the KL clip). The
  /// products run on `kernels`' device.
  caf::expected<double> precondition(parameter_set& grads,
                                     kfac_inverter& kernels) const;

  /// precondition on the CPU.
  caf::expected<double> precondition(parameter_set& grads) const;

  /// Layers that have an inverse.
  size_t ready_layers() const;

  /// Per layer, its weight and bias index and its inverse (null: none yet),
  /// for kfac_apply (runtime/kfac/kfac_update.hpp).
  std::vector<kfac_layer_slot> slots() const;

  /// Inversions that needed more damping than asked for, so far.
  int64_t damping_increases() const noexcept {
    return damping_increases_;
  }

  const kfac_config& config() const noexcept {
    return cfg_;
  }

private:
  struct layer_state {
    std::string name;
    layer_kind kind = layer_kind::dense;
    size_t weight = 0;
    size_t bias = 0;
    int64_t locations = 1;
    tensor a_raw;
    tensor g_raw;
    float a_weight = 0;
    float g_weight = 0;
    int64_t cov_updates = 0;
    /// The latest inverse; shared so that the state stays copyable while
    /// layer_inverse is only declared here.
    std::shared_ptr<const layer_inverse> inverse;
  };

  /// A layer's new inverse and whether it needed more damping.
  struct fresh_inverse {
    std::shared_ptr<const layer_inverse> inverse;
    bool damping_raised = false;
  };

  kfac_preconditioner(kfac_config cfg, std::vector<layer_state> layers);

  /// The damped inverse of `l`'s current factors (l is not changed).
  caf::expected<fresh_inverse> invert(const layer_state& l,
                                      kfac_inverter& inverter) const;

  kfac_config cfg_;
  std::vector<layer_state> layers_;
  int64_t damping_increases_ = 0;
};

} // namespace syncfac
