// Times the K-FAC factor statistics of the seeds' ConvNet at batch 128:
// conv2 (x [128, 14, 14, 16], kernel 5x5x16x16 SAME, with bias: 25,088
// patches of 401), conv0 (28x28x1, 5x5: 100,352 patches of 26) and fc4
// (784 + 1 -> 10), for 1 and 2 threads. GFLOP/s counts
// 2 * rows * width^2 for A, the full X^T X; the kernels compute only its
// lower triangle, so the arithmetic they do is about half that.
//
//   build/bin/bench_kfac_factors [--threads 1,2] [--seconds 1]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/kfac_factors.hpp"
#include "bench/bench_util.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;

namespace {

using bench::ok;
using bench::timing;

tensor random(const tensor_shape& shape, std::mt19937& rng, float scale) {
  tensor t(shape);
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (auto& v : t.values())
    v = dist(rng);
  return t;
}

timing measure(double seconds, const std::function<void()>& f) {
  return bench::measure(f, seconds);
}

void report(const char* what, int threads, const timing& t, double flops) {
  std::printf("%-34s threads=%d  best %8.2f ms  median %8.2f ms  "
              "%6.1f GFLOP/s  cpu %8.2f ms\n",
              what, threads, t.best_ms, t.median_ms,
              flops / (t.best_ms * 1e-3) * 1e-9, t.best_cpu_ms);
}

/// Times factor statistics (with bias) on `threads` threads into A and G,
/// kept from one measurement to the next as a training run keeps them,
/// and reports each.
struct factor_timer {
  explicit factor_timer(double seconds) : seconds(seconds) {
    // nop
  }

  double seconds;
  int threads = 1;
  tensor A, G;

  void conv(const char* what, const conv2d_geometry& g, const tensor& x,
            const tensor& ds, const factor_sampling& s, double flops) {
    report(what, threads, measure(seconds, [&] {
             ok(cpu::conv_factors(g, x, ds, true, s, threads, A, G));
           }),
           flops);
  }

  void dense(const char* what, const tensor& x, const tensor& ds,
             const factor_sampling& s, double flops) {
    report(what, threads, measure(seconds, [&] {
             ok(cpu::dense_factors(x, ds, true, s, threads, A, G));
           }),
           flops);
  }
};

} // namespace

int main(int argc, char** argv) {
  auto opt = bench::parse_options(argc, argv);
  std::mt19937 rng(42);
  auto g = conv2d_geometry::make({128, 14, 14, 16}, {5, 5, 16, 16}, 1, 1,
                                 padding::same);
  if (!g) {
    std::fprintf(stderr, "%s\n", render(g.error()).c_str());
    return 1;
  }
  auto x = random(g->input_shape(), rng, 1.0f);
  auto ds = random(g->output_shape(), rng, 1.0f / 128);
  auto rows = static_cast<double>(g->batch * g->locations());
  auto width = static_cast<double>(g->patch_size() + 1);
  double conv_flops = 2.0 * rows * width * width;
  auto g0 = conv2d_geometry::make({128, 28, 28, 1}, {5, 5, 1, 16}, 1, 1,
                                  padding::same);
  auto x0 = random(g0->input_shape(), rng, 1.0f);
  auto ds0 = random(g0->output_shape(), rng, 1.0f / 128);
  double conv0_flops = 2.0 * 128 * 784 * 26 * 26;
  // fc4: 7*7*16 inputs (+1) to 10 classes.
  auto dx = random({128, 784}, rng, 1.0f);
  auto dds = random({128, 10}, rng, 1.0f / 128);
  double dense_flops = 2.0 * 128 * 785.0 * 785.0;
  factor_timer timer{opt.seconds};
  for (int threads : opt.threads) {
    timer.threads = threads;
    timer.conv("conv2 A+G (25088 x 401, O 16)", *g, x, ds, {}, conv_flops);
    factor_sampling s;
    s.max_locations = 16;
    s.seed = 1;
    timer.conv("conv2 A+G, 16 of 196 locations", *g, x, ds, s,
               conv_flops * 16.0 / 196.0);
    // The defaults of the statistics pass: 16 examples, 4 conv locations
    // each (a backward pass of 16 examples: ds scaled for N = 16).
    factor_sampling d;
    d.max_examples = 16;
    d.max_locations = 4;
    d.seed = 1;
    timer.conv("conv2 A+G, 16 examples x 4 locations", *g, x, ds, d,
               2.0 * 64 * width * width);
    timer.conv("conv0 A+G, 16 examples x 4 locations", *g0, x0, ds0, d,
               2.0 * 64 * 26 * 26);
    timer.dense("fc4 A+G, 16 examples", dx, dds, d, 2.0 * 16 * 785.0 * 785.0);
    timer.conv("conv0 A+G (100352 x 26, O 16)", *g0, x0, ds0, {}, conv0_flops);
    timer.dense("fc4 A+G (128 x 785, O 10)", dx, dds, {}, dense_flops);
  }
  return 0;
}
