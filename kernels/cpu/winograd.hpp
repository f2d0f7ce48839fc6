#pragma once

// Stride-1 3x3 and 5x5 convolutions by Winograd's minimal filtering,
// F(4x4, 3x3) and F(2x2, 5x5) (winograd_kernels.hpp): when it runs (the
// rule below, on the layer's geometry only), the kernel transform and the
// calls over blocks of tiles. Serves the forward pass, the input
// gradient computed as a forward conv of ds (conv_plan.hpp's dx_plan) and
// the weight gradient (the forward plan's tiles run backwards:
// winograd_kernels.hpp).

#include <cstdint>
#include <vector>

#include "kernels/cpu/conv_plan.hpp"
#include "kernels/cpu/winograd_kernels.hpp"
#include "kernels/geometry.hpp"

namespace syncfac::cpu {

/// One Winograd conv of n source images (x, or ds for the input gradient).
struct winograd_plan {
  bool use = false;
  winograd_layout layout{}; // pointers unset
  image_box src;            // one source image
  image_box padded;         // src zero-padded to the tiles' windows
  int64_t top = 0;          // where src sits in padded
  int64_t left = 0;
  int64_t block = 0; // tiles per micro-kernel call (its scratch in L2)
};

/// The rule (docs/kernels.md, "Winograd"): a square 3x3 or 5x5 kernel at
/// stride 1 with at least winograd_min_channels input and output channels
/// (measured faster at every such shape and at both levels, the ConvNet's
/// conv2 included). It reads the geometry only, never the batch, a tower's
/// share or the thread count, so a tower computes each example as one
/// device does.
bool winograd_pays(int64_t k_h, int64_t k_w, int64_t stride_h,
                   int64_t stride_w, int64_t in_c, int64_t out_c);

inline constexpr int64_t winograd_min_channels = 16;

/// The forward pass of g; use is false where the rule says direct.
winograd_plan make_winograd_plan(const conv2d_geometry& g);

/// The input gradient of g as a forward conv of ds with the kernel flipped
/// and its channel axes swapped; use is false where the rule says direct.
winograd_plan make_winograd_dx_plan(const conv2d_geometry& g);

/// Either plan without the rule (tests compare Winograd and the direct
/// conv on geometries the rule leaves to the direct one); use is false
/// where Winograd cannot run (stride, kernel size, padding).
winograd_plan make_winograd_plan_anyway(const conv2d_geometry& g,
                                        bool input_gradient);

/// U = G g G^T [alpha^2, cpad, opad] of the kernel w [kh, kw, C, O]
/// (flipped and with C and O swapped for the input gradient), computed in
/// double, input channels on up to `threads` threads (the same bits for
/// any count), and the bias [opad] (zero when b is null).
void pack_winograd(const conv2d_geometry& g, const winograd_plan& wp,
                   bool input_gradient, const float* w, const float* b,
                   int threads, std::vector<float>& u,
                   std::vector<float>& bias);

/// out = act(conv + bias) of n source images; `padded` holds
/// n * wp.padded.size() floats, scratch winograd_scratch_floats(block).
void winograd_images(const winograd_plan& wp, const float* src, int64_t n,
                     const float* u, const float* bias, bool relu,
                     float* out, float* padded, float* scratch);

/// The weight gradient of g runs on the forward pass's plan (the same
/// rule, tiles and padding).
inline winograd_plan make_winograd_dw_plan(const conv2d_geometry& g) {
  return make_winograd_plan(g);
}

/// Floats of one partial dU [alpha^2, cpad, opad] of the weight gradient.
int64_t winograd_dw_floats(const winograd_plan& wp);

/// du += the dU of n (>= 1) images of x and their ds [n, out_h, out_w,
/// out_c], tiles in order (overwrite: du = it, du's old values not read:
/// a chunk's first call needs no zeroed partial); `padded` holds n *
/// wp.padded.size() floats, scratch winograd_scratch_floats(block).
void winograd_dw_images(const winograd_plan& wp, const float* x,
                        const float* ds, int64_t n, float* du, bool overwrite,
                        float* padded, float* scratch);

/// dw [kh, kw, C, O] = G^T dU G of the sum of `partials` (>= 1) partial
/// dU's (winograd_dw_floats apart), summed in order into `du` (resized;
/// the caller keeps it between calls) and transformed in double, on up to
/// `threads` threads (the same bits for any count).
void unpack_winograd_dw(const conv2d_geometry& g, const winograd_plan& wp,
                        const float* du_partials, int64_t partials,
                        int threads, std::vector<double>& du, float* dw);

/// For benchmarks only: false makes every plan say direct, so that one
/// process can time both (bench_conv_passes --winograd).
void allow_winograd(bool allowed);

} // namespace syncfac::cpu
