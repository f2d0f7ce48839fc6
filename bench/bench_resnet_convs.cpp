// ResNet-20's convolutions (examples/models/resnet20.json, batch 128) pass
// by pass, as its step runs them: batch_norm follows every conv, so the
// forward has no activation and the backward passes start from the ds
// batch_norm's backward writes. For each distinct geometry: forward, weight
// gradient and (but for the stem) input gradient, the best and median
// wall ms, the best process CPU ms (steadier on a shared machine), GFLOP/s
// and the share of the FP32 FMA peak at the same level and thread count
// (bench/fma_peak.hpp; both wall-timed), and GFLOP/s by CPU time with its
// share of the one-thread peak by CPU time measured just before; then the whole step's conv work, each geometry
// counted as often as the model has it. docs/benchmarks.md, "ResNet-20's
// convolutions".
//
//   build/bin/bench_resnet_convs [--threads 1,2] [--seconds 0.5]
//                                [--isa auto|avx2|avx512]
//                                [--winograd rule|direct|both]

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/conv_bench.hpp"
#include "bench/fma_peak.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/winograd.hpp"

using namespace syncfac;

namespace {

using bench::conv_flops;
using bench::ok;

struct resnet_conv {
  const char* name;
  conv2d_geometry g;
  int count;    // how many convs of the model have this geometry
  bool with_dx; // the stem's input gradient is never needed
};

conv2d_geometry conv(int64_t hw, int64_t in_c, int64_t out_c, int64_t k,
                     int64_t stride) {
  auto g = conv2d_geometry::make({128, hw, hw, in_c}, {k, k, in_c, out_c},
                                 stride, stride, padding::same);
  if (!g) {
    std::fprintf(stderr, "%s\n", render(g.error()).c_str());
    std::exit(1);
  }
  return *g;
}

std::vector<resnet_conv> resnet20_convs() {
  return {
    {"stem 28x28 1->16", conv(28, 1, 16, 3, 1), 1, false},
    {"28x28 16->16", conv(28, 16, 16, 3, 1), 6, true},
    {"28x28 16->32 /2", conv(28, 16, 32, 3, 2), 1, true},
    {"1x1 16->32 /2", conv(28, 16, 32, 1, 2), 1, true},
    {"14x14 32->32", conv(14, 32, 32, 3, 1), 5, true},
    {"14x14 32->64 /2", conv(14, 32, 64, 3, 2), 1, true},
    {"1x1 32->64 /2", conv(14, 32, 64, 1, 2), 1, true},
    {"7x7 64->64", conv(7, 64, 64, 3, 1), 5, true},
  };
}

struct totals {
  double ms = 0;     // medians
  double best_ms = 0;
  double cpu_ms = 0;
  double flops = 0;
};

void bench_conv(backend& dev, const resnet_conv& l,
                const bench::options& opt, double peak,
                std::vector<totals>& sums) {
  auto seconds = opt.seconds;
  const auto& g = l.g;
  // What this core delivers now, by CPU time, next to the passes: on a
  // shared machine it drifts with the other work on the core.
  double cpu_peak = bench::fma_peak_cpu_gflops(cpu::isa_name(), 0.2);
  bench::conv_operands c(g);
  auto act = activation::identity;
  ok(dev.conv2d_forward(g, c.x, c.w, c.b, act, c.y));
  // The backward passes from dy: identity activations make ds = dy.
  auto passes = bench::step_passes(dev, g, c, act, c.dy, l.with_dx);
  double flops = conv_flops(g);
  auto modes = opt.winograd_modes();
  for (auto& p : passes)
   for (size_t mode = 0; mode < modes.size(); ++mode) {
    cpu::allow_winograd(modes[mode]);
    auto t = bench::measure(p.run, seconds);
    cpu::allow_winograd(true);
    auto& sum = sums[mode];
    // The share of the peak compares wall-timed figures (as the peak is);
    // the rate by CPU time is the one a busy machine stretches less.
    double rate = flops / (t.best_ms * 1e-3) * 1e-9;
    double cpu_rate = flops / (t.best_cpu_ms * 1e-3) * 1e-9;
    std::printf("  %-16s x%d %-3s %-6s isa=%-6s threads=%d  best %7.3f ms  "
                "median %7.3f ms  cpu %7.3f ms  %6.1f GFLOP/s (%3.0f%% of FMA "
                "peak)  %6.1f GFLOP/s by cpu (%3.0f%% of %.0f by cpu)\n",
                l.name, l.count, p.name, modes[mode] ? "rule" : "direct",
                cpu::isa_name(), dev.threads(),
                t.best_ms, t.median_ms, t.best_cpu_ms, rate,
                100.0 * rate / peak, cpu_rate, 100.0 * cpu_rate / cpu_peak,
                cpu_peak);
    sum.ms += l.count * t.median_ms;
    sum.best_ms += l.count * t.best_ms;
    sum.cpu_ms += l.count * t.best_cpu_ms;
    sum.flops += l.count * flops;
  }
}

void bench_level(const bench::options& opt) {
  for (int threads : opt.threads) {
    auto dev = make_cpu_backend(threads);
    auto peak = bench::fma_peak_gflops(cpu::isa_name(), threads, opt.seconds);
    std::printf("fma peak %s threads=%d  %.1f GFLOP/s\n", cpu::isa_name(),
                threads, peak);
    auto modes = opt.winograd_modes();
    std::vector<totals> sums(modes.size());
    for (const auto& l : resnet20_convs())
      bench_conv(*dev, l, opt, peak, sums);
    for (size_t mode = 0; mode < modes.size(); ++mode) {
    const auto& sum = sums[mode];
    double rate = sum.flops / (sum.best_ms * 1e-3) * 1e-9;
    double cpu_rate = sum.flops / (sum.cpu_ms * 1e-3) * 1e-9;
    std::printf("resnet20 conv work %s isa=%s threads=%d per step of 128: "
                "median %.1f ms, best %.1f ms, %.1f GFLOP/s (%.0f%% of FMA "
                "peak); best cpu %.1f ms, %.1f GFLOP/s by cpu\n",
                modes[mode] ? "rule" : "direct", cpu::isa_name(), threads,
                sum.ms, sum.best_ms, rate, 100.0 * rate / peak, sum.cpu_ms,
                cpu_rate);
    }
    std::printf("\n");
  }
}

} // namespace

int main(int argc, char** argv) {
  auto opt = bench::parse_options(argc, argv);
  std::printf("ResNet-20's convolutions (batch 128, identity activation: "
              "batch_norm follows) as its step runs them; %.1fs of calls "
              "per pass\n",
              opt.seconds);
  return bench::at_each_fma_level(opt, bench_level);
}
