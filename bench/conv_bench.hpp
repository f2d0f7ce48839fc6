#pragma once

// What the conv benchmarks share (bench_kernels, bench_conv_passes,
// bench_resnet_convs): random inputs, a convolution's operands, the passes
// a training step runs of it, the ConvNet's SAME stride-1 geometries, and a
// conv's FLOPs.

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "bench/bench_util.hpp"
#include "kernels/backend.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::bench {

/// Normal values of standard deviation `scale`.
inline tensor random_tensor(const tensor_shape& shape, std::mt19937& rng,
                            float scale) {
  tensor t(shape);
  std::normal_distribution<float> dist(0.0f, scale);
  for (auto& v : t.values())
    v = dist(rng);
  return t;
}

/// A convolution's random operands (input, kernel, bias, output gradient;
/// the same values in every benchmark that times geometry `g`) and the
/// outputs its passes write.
struct conv_operands {
  tensor x, w, b, dy;
  tensor y, ds, dw, db, dx;

  explicit conv_operands(const conv2d_geometry& g) {
    std::mt19937 rng(7);
    x = random_tensor(g.input_shape(), rng, 1.0f);
    w = random_tensor(g.kernel_shape(), rng, 0.1f);
    b = random_tensor({g.out_c}, rng, 0.1f);
    dy = random_tensor(g.output_shape(), rng, 1.0f);
  }
};

/// One pass of a convolution to time: its name and a run of it.
struct conv_pass {
  const char* name;
  std::function<void()> run;
};

/// The passes a training step runs of the conv `g` on `dev` (as the step
/// does, the backward ones from a given ds): the forward with `act`, the
/// weight gradient from `ds` and, with `with_dx`, the input gradient from
/// it. They write c's outputs; `dev`, `g`, `c` and `ds` must outlive them.
inline std::vector<conv_pass> step_passes(backend& dev,
                                          const conv2d_geometry& g,
                                          conv_operands& c, activation act,
                                          const tensor& ds, bool with_dx) {
  std::vector<conv_pass> passes{
    {"fwd", [&dev, &g, &c, act] {
       ok(dev.conv2d_forward(g, c.x, c.w, c.b, act, c.y));
     }},
    {"dw", [&dev, &g, &c, &ds] {
       ok(dev.conv2d_backward_from_ds(g, c.x, c.w, ds, c.dw, c.db, nullptr));
     }},
  };
  if (with_dx)
    passes.push_back({"dx", [&dev, &g, &c, &ds] {
                        ok(dev.conv2d_backward_data_from_ds(g, c.x, c.w, ds,
                                                            &c.dx));
                      }});
  return passes;
}

/// A SAME stride-1 convolution of input `in` with kernel `k`; exits on a
/// shape error, naming it.
inline conv2d_geometry same_conv(const tensor_shape& in,
                                 const tensor_shape& k) {
  auto g = conv2d_geometry::make(in, k, 1, 1, padding::same);
  if (!g) {
    std::fprintf(stderr, "%s\n", render(g.error()).c_str());
    std::exit(1);
  }
  return *g;
}

/// 2 * locations * patch size * out channels: one pass (forward, weight or
/// input gradient).
inline double conv_flops(const conv2d_geometry& g) {
  return 2.0 * static_cast<double>(g.batch * g.locations())
         * static_cast<double>(g.patch_size()) * static_cast<double>(g.out_c);
}

} // namespace syncfac::bench
