#pragma once

// How a conv2d call is cut into tiles of images and laid out for the
// implicit-GEMM micro-kernels: padded buffer sizes, patch offsets, packed
// weights. Everything here depends on the geometry only, never on the
// thread count, so results do not either.

#include <cstdint>
#include <vector>

#include "kernels/cpu/conv_kernels.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/geometry.hpp"

namespace syncfac::cpu {

/// Height, width and channels of one NHWC image.
struct image_box {
  int64_t h = 0;
  int64_t w = 0;
  int64_t c = 0;

  int64_t size() const {
    return h * w * c;
  }
};

/// The forward pass and the weight gradient: patches read from the input
/// zero-padded to hp x wp.
struct conv_plan {
  image_box in;            // the input image
  image_box padded;        // the zero-padded input image
  bool needs_padding = false;
  int64_t rows_per_image = 0; // out_h * out_w
  int64_t tile_images = 1;
  int64_t tiles = 0;
  int64_t K = 0;    // patch size
  int64_t opad = 0; // out_c rounded up to the vector width
  patch_layout layout{};
};

conv_plan make_plan(const conv2d_geometry& g);

/// The input gradient of a stride-1 convolution computed as a convolution:
/// ds zero-padded to hq x wq, correlated with the kernel flipped in space
/// and with its channel axes swapped. This reuses the forward micro-kernel,
/// which beats scattering ds w^T back into the input by avoiding the
/// read-modify-write of every patch element.
struct dx_plan {
  bool use = false;
  image_box ds;     // one image of ds
  image_box padded; // ds zero-padded
  int64_t top = 0;  // where ds sits in the padded image
  int64_t left = 0;
  int64_t rows_per_image = 0; // in_h * in_w
  int64_t K = 0;              // k_h * k_w * out_c
  int64_t cpad = 0;           // in_c rounded up to the vector width
  patch_layout layout{};
};

/// Used for stride 1 and at least one vector of input channels; otherwise
/// the input gradient is scattered (conv_input_grad).
dx_plan make_dx_plan(const conv2d_geometry& g);

/// Offsets of the first tap of each output row of a full tile.
void fill_row_offsets(const conv2d_geometry& g, conv_plan& p,
                      std::vector<int64_t>& offsets);

void fill_dx_row_offsets(const conv2d_geometry& g, int64_t tile_images,
                         dx_plan& d, std::vector<int64_t>& offsets);

/// Offset of patch element k from the first tap.
void fill_tap_offsets(const conv_plan& p, std::vector<int64_t>& offsets);

/// w [K, O] -> [K, opad] and b [O] -> [opad], zero past O.
void pack_forward(const conv_plan& p, int64_t out_c, const float* w,
                  const float* b, conv_workspace& ws);

/// Row padding of w_transposed, so that the scatter kernel can read full
/// vectors past the end of a kernel row.
constexpr int64_t wt_row_pad = 16;

/// w [K, O] -> [O, K + wt_row_pad].
void pack_transposed(const conv_plan& p, int64_t out_c, const float* w,
                     conv_workspace& ws);

/// w [kh, kw, C, O] -> [kh, kw, O, cpad] flipped in kh and kw, and a zero
/// bias [cpad].
void pack_flipped(const conv2d_geometry& g, const dx_plan& d, const float* w,
                  conv_workspace& ws);

/// Copies n images of shape `in` into images of `out`'s height and width,
/// at (top, left), with zeros around them.
void pad_images(const float* src, int64_t n, image_box in, image_box out,
                int64_t top, int64_t left, float* dst);

/// The inverse: the (top, left) window of n images of `padded` to `out`.
void unpad_images(const float* src, int64_t n, image_box padded,
                  image_box out, int64_t top, int64_t left, float* dst);

struct tile_span {
  int64_t first_image;
  int64_t images;
  int64_t first_row;
  int64_t rows;
};

tile_span tile_of(const conv2d_geometry& g, const conv_plan& p, int64_t t);

/// Weight-gradient partials (one per chunk of tiles) worth keeping.
int64_t chunk_count(const conv_plan& p, int threads);

/// Grows each of `threads` buffers to at least `size` floats from
/// line_start(buffer) on.
void reserve_thread_buffers(std::vector<std::vector<float>>& buffers,
                            int threads, int64_t size);

/// Grows `buffer` to at least n values and never shrinks it: the
/// backend's workspace serves every conv of a model in turn, and a
/// std::vector resized down for a small layer and up again for a large
/// one zero-fills what it grows by (megabytes of Winograd partials each
/// step). Its callers write every value they read.
template <class T>
void grow_to(std::vector<T>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n)
    buffer.resize(static_cast<size_t>(n));
}

/// The buffer's first float on a 64-byte cache line: with rows of 16
/// channels every patch vector of the weight gradient then reads one line,
/// not two (std::vector aligns to 16 bytes only).
float* line_start(std::vector<float>& buffer);

/// sums[o] += sum_m ds[m, o] for m < rows, o < cols.
void add_column_sums(const float* ds, int64_t rows, int64_t cols,
                     float* sums);

} // namespace syncfac::cpu
