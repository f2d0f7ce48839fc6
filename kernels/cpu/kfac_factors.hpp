#pragma once

// K-FAC factor statistics on the CPU (docs/design.md §3): the Kronecker
// factors A (input side) and G (output-gradient side) of dense and conv2d
// layers, optional sub-sampling for a cheap estimate, and their running
// average.
//
// Conventions (the inverse side relies on them):
// - Inputs come from a layer's kfac_view: its input and ds = dL/ds, the
//   pre-activation gradient of the MEAN loss over the batch of N examples.
//   A per-example gradient is therefore g = N * ds (N is the whole batch the
//   loss was averaged over, also when only some examples are sampled).
// - Dense, input a [N, in], ds [N, out]: with ā = [a, 1] (the 1 only with a
//   bias), A = (1/n) Σ ā ā^T [in(+1), in(+1)] and G = (1/n) Σ g g^T
//   [out, out], the sums over the n examples used. The Fisher block of the
//   weights (rows of W^T, then the bias) is approximately A ⊗ G.
// - Conv2d (KFC, Grosse & Martens 2016), x [N, H, W, C], ds [N, OH, OW, O]:
//   ā_{n,t} is the im2col patch of output location t of example n, ordered
//   (kh, kw, c) like the kernel [kh, kw, C, O] seen as [P, O], P = kh*kw*C,
//   with the geometry's zero padding, and a 1 appended with a bias. A and G
//   are averages over the m chosen (example, location) pairs:
//     A = (1/m) Σ ā_{n,t} ā_{n,t}^T   [P(+1), P(+1)]
//     G = (1/m) Σ g_{n,t} g_{n,t}^T   [O, O],  g_{n,t} = N * ds_{n,t}.
//   The Fisher block is then approximately T * (A ⊗ G) with T = out_h *
//   out_w locations per example (the per-example gradient sums T terms),
//   so the inverse damps each factor with sqrt(λ / T), not sqrt(λ).
// - Results are exactly symmetric, and bit-identical for any thread count:
//   the summation order depends only on the shapes and the sampling.
// - Every shape that does not fit is ec::shape_mismatch naming both shapes;
//   on any error nothing is written.

#include <cstdint>
#include <vector>

#include <caf/error.hpp>

#include "kernels/geometry.hpp"
#include "kernels/kfac_types.hpp"
#include "kernels/tensor.hpp"

namespace syncfac::cpu {


/// Factors of at most this many rows (sub-sampled statistics) are computed
/// by a kernel for few rows: whole output rows, both triangles, no partial
/// sums; on one thread when called with threads == 1.
inline constexpr int64_t few_factor_rows = 256;

/// How many rows `s` selects in a batch of `batch` examples with
/// `locations` positions each (1 for a dense layer): sampled_rows' size,
/// without drawing them.
int64_t sampled_row_count(const factor_sampling& s, int64_t batch,
                          int64_t locations);

/// The rows (flat indices n * locations + t, ascending) that `s` selects in
/// a batch of `batch` examples with `locations` positions each (1 for a
/// dense layer). Sampled positions come from one std::mt19937_64 seeded
/// with s.seed, consumed example by example (raw draws with a partial
/// Fisher-Yates shuffle, no std:: distribution, so every standard library
/// picks the same positions). Arguments must be valid (>= 0).
std::vector<int64_t> sampled_rows(const factor_sampling& s, int64_t batch,
                                  int64_t locations);

/// A and G of a dense layer from its input [N, in] and pre-activation
/// gradient ds [N, out] of the mean loss; s.max_locations is ignored.
/// threads >= 1; negative sampling counts are ec::invalid_argument.
caf::error dense_factors(const tensor& input, const tensor& ds,
                         bool with_bias, const factor_sampling& s,
                         int threads, tensor& A, tensor& G);

/// A and G of a conv2d layer (see the conventions above) from its input x
/// [N, H, W, C] and ds [N, out_h, out_w, O] with g's geometry.
caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                        const tensor& ds, bool with_bias,
                        const factor_sampling& s, int threads, tensor& A,
                        tensor& G);


/// As dense_factors / conv_factors, but a factor with fewer rows than
/// columns comes as its rows (A: [a, 1] or the patches with their 1, scale
/// 1/m; G: ds, scale N²/m) in *_rows, its matrix left empty; a factor with
/// at least as many rows as columns comes as the matrix (bit-identical to
/// dense_factors / conv_factors), its rows left empty.
caf::error dense_factors(const tensor& input, const tensor& ds,
                         bool with_bias, const factor_sampling& s,
                         int threads, tensor& A, tensor& G, gram_rows& A_rows,
                         gram_rows& G_rows);
caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                        const tensor& ds, bool with_bias,
                        const factor_sampling& s, int threads, tensor& A,
                        tensor& G, gram_rows& A_rows, gram_rows& G_rows);

/// raw = beta · raw + Σ_b weights[b] · rows[b].scale · rows[b].xᵀ rows[b].x,
/// both triangles, exactly symmetric (the rows of all blocks in one
/// symmetric rank-k update). An empty raw starts as zeros of the blocks'
/// width. Blocks of another width than raw's are ec::shape_mismatch,
/// weights that are negative or not finite, or a count other than the
/// blocks', ec::invalid_argument; nothing changes on error.
caf::error fold_rows(tensor& raw, double beta,
                     const std::vector<gram_rows>& rows,
                     const std::vector<double>& weights);

/// Zero-start exponential moving average with weight normalisation:
///   raw = decay * raw + (1 - decay) * stat,
///   weight = decay * weight + (1 - decay),
/// the factor being raw / weight (ema_value), so the first update's value is
/// the batch statistic itself. An empty raw starts as zeros of stat's shape
/// (weight must be 0 then). decay outside [0, 1) or a weight outside [0, 1]
/// is ec::invalid_argument, a non-finite stat ec::non_finite, a shape other
/// than raw's ec::shape_mismatch; nothing changes on error.
caf::error ema_update(tensor& raw, float& weight, const tensor& stat,
                      float decay);

/// out = raw / weight; weight 0 (no update yet: 0/0) is ec::invalid_argument.
caf::error ema_value(const tensor& raw, float weight, tensor& out);

} // namespace syncfac::cpu
