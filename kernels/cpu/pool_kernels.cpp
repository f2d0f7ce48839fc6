// Max-pooling's per-image kernel at one instruction-set level, in the
// level's namespace SYNCFAC_KERNEL_ISA (kernels/cpu/isa_kernels.hpp).
#include "kernels/cpu/isa_kernels.hpp"

#include "kernels/cpu/simd.hpp"

namespace syncfac::cpu::SYNCFAC_KERNEL_ISA {

namespace {

struct window {
  int64_t begin;
  int64_t end;
};

// Without std::min/max: a template instantiated in a level's objects is a
// symbol the linker may share with the baseline's (isa_kernels.hpp).
window clip(int64_t out, int64_t stride, int64_t pad, int64_t k,
            int64_t in) {
  auto first = out * stride - pad;
  auto begin = first < 0 ? 0 : first;
  auto end = first + k < in ? first + k : in;
  return {begin, end};
}

// One output pixel, a vector of channels at a time. The winner is kept
// as its offset from the window's first element, the same for every
// lane, and made an index once at the end.
void pool_pixel(const float* x, int32_t x_base, int64_t in_w, int64_t C,
                window hw, window ww, float* y, int32_t* arg) {
  auto first = (hw.begin * in_w + ww.begin) * C;
  int64_t c = 0;
  for (; c + simd::width <= C; c += simd::width) {
    const float* at = x + first + c;
    auto best = simd::load(at);
    auto best_offset = simd::splat(0);
    for (auto dh = int64_t{0}; dh < hw.end - hw.begin; ++dh)
      for (auto dw = int64_t{0}; dw < ww.end - ww.begin; ++dw) {
        auto offset = static_cast<int32_t>((dh * in_w + dw) * C);
        auto v = simd::load(at + offset);
        auto gt = simd::greater(v, best);
        best = simd::select(gt, v, best);
        best_offset = simd::select(gt, simd::splat(offset), best_offset);
      }
    simd::store(y + c, best);
    simd::store(arg + c,
                simd::add(simd::iota(x_base + static_cast<int32_t>(first + c)),
                          best_offset));
  }
  for (; c < C; ++c) {
    y[c] = x[first + c];
    arg[c] = x_base + static_cast<int32_t>(first + c);
    for (auto ih = hw.begin; ih < hw.end; ++ih)
      for (auto iw = ww.begin; iw < ww.end; ++iw) {
        auto pos = (ih * in_w + iw) * C + c;
        if (x[pos] > y[c]) {
          y[c] = x[pos];
          arg[c] = x_base + static_cast<int32_t>(pos);
        }
      }
  }
}

} // namespace

void max_pool_image(const pool2d_geometry& g, const float* x, int32_t x_base,
                    float* y, int32_t* arg) {
  auto C = g.channels;
  for (int64_t oh = 0; oh < g.out_h; ++oh) {
    auto hw = clip(oh, g.stride_h, g.pad_top, g.k_h, g.in_h);
    for (int64_t ow = 0; ow < g.out_w; ++ow) {
      auto ww = clip(ow, g.stride_w, g.pad_left, g.k_w, g.in_w);
      auto off = (oh * g.out_w + ow) * C;
      pool_pixel(x, x_base, g.in_w, C, hw, ww, y + off, arg + off);
    }
  }
}

} // namespace syncfac::cpu::SYNCFAC_KERNEL_ISA
