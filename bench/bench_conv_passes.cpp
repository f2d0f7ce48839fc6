// The ConvNet's convolutions pass by pass (forward, weight gradient, input
// gradient) at every instruction-set level this CPU has and each thread
// count: GFLOP/s of the best call, the median, the best process CPU time,
// and the share of the FP32 FMA peak measured at the same level and thread
// count (bench/fma_peak.hpp). docs/benchmarks-history.md, "Conv passes at the peak"
// and "The activation gradient inside max-pool's backward".
//
//   build/bin/bench_conv_passes [--threads 1,2] [--seconds 0.5]
//                               [--isa auto|avx2|avx512]
//                               [--winograd rule|direct|both]
//
// --isa auto (the default) runs every supported level from the lowest;
// a named level runs that one only. The passes are timed as the step runs
// them: each conv's output goes into a max-pool, whose backward writes the
// conv's ds through relu (max_pool_backward_activated, "pool fused", in
// GB/s), and the weight-gradient pass (conv2d_backward_from_ds without dx)
// and the input-gradient pass (conv2d_backward_data_from_ds) start from
// that ds: no activation pass in them. "pool plain" and "ds alone" time
// the two passes the fused one replaced (the plain scatter into dL/dy,
// then ds = dy * relu'(y)).

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
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
using bench::same_conv;

struct layer {
  const char* name;
  conv2d_geometry g;
  pool2d_geometry pool; // the max-pool after it
  bool with_dx;         // the step computes its input gradient
};

void print_memory_pass(const layer& l, const char* what, int threads,
                       const bench::timing& t, double bytes,
                       const char* traffic) {
  std::printf("  %-6s %-10s isa=%-7s threads=%d  best %7.3f ms  median "
              "%7.3f ms  cpu %7.3f ms  %6.1f GB/s (%s)\n",
              l.name, what, cpu::isa_name(), threads, t.best_ms, t.median_ms,
              t.best_cpu_ms, bytes / (t.best_ms * 1e-3) * 1e-9, traffic);
}

// The max-pool backward after a conv, as the step runs it now (fused: the
// pool writes the conv's ds through relu), and the two passes it replaced
// (the plain scatter into dL/dy, then ds = dy * relu'(y) alone); returns
// the fused pass's best ms. c.ds holds the fused pass's ds afterwards.
double bench_pool_backward(backend& dev, const layer& l,
                           bench::conv_operands& c, double seconds) {
  auto act = activation::relu;
  tensor pooled, d_pooled, d_input;
  std::vector<int32_t> argmax;
  ok(dev.max_pool_forward(l.pool, c.y, pooled, argmax));
  std::mt19937 rng(11);
  d_pooled = bench::random_tensor(l.pool.output_shape(), rng, 1.0f);
  double in_bytes = 4.0 * static_cast<double>(c.y.size());
  double out_bytes = 4.0 * static_cast<double>(pooled.size());
  auto plain = bench::measure(
    [&] { ok(dev.max_pool_backward(l.pool, d_pooled, argmax, d_input)); },
    seconds);
  print_memory_pass(l, "pool plain", dev.threads(), plain,
                    3 * out_bytes + in_bytes,
                    "dy, argmax read, dL/dy written; before this stop");
  auto ds_alone = bench::measure(
    [&] {
      ok(dev.activation_backward(act, c.y, d_input, c.ds));
    },
    seconds);
  print_memory_pass(l, "ds alone", dev.threads(), ds_alone, 3 * in_bytes,
                    "y, dy read, ds written; no longer in the step");
  auto fused = bench::measure(
    [&] {
      ok(dev.max_pool_backward_activated(l.pool, d_pooled, argmax, pooled,
                                         act, c.ds));
    },
    seconds);
  print_memory_pass(l, "pool fused", dev.threads(), fused,
                    3 * out_bytes + in_bytes,
                    "dy, pooled y, argmax read, ds written; in the step");
  return fused.best_ms;
}

// Times the passes of one layer; returns, per Winograd mode
// (options::winograd_modes), the summed best ms of the conv passes the
// ConvNet step runs (the backward ones from a given ds) and
// adds the fused pool backward's to *pool_ms.
std::vector<double> bench_layer(backend& dev, const layer& l,
                                const bench::options& opt, double peak,
                                double* pool_ms) {
  auto seconds = opt.seconds;
  const auto& g = l.g;
  bench::conv_operands c(g);
  auto act = activation::relu;
  ok(dev.conv2d_forward(g, c.x, c.w, c.b, act, c.y));
  *pool_ms += bench_pool_backward(dev, l, c, seconds);
  auto passes = bench::step_passes(dev, g, c, act, c.ds, l.with_dx);
  double flops = conv_flops(g);
  // What this core delivers now, by CPU time, next to the passes: on a
  // shared machine it drifts with the other work on the core.
  double cpu_peak = bench::fma_peak_cpu_gflops(cpu::isa_name(), 0.2);
  auto modes = opt.winograd_modes();
  std::vector<double> sum_ms(modes.size());
  for (auto& p : passes)
   for (size_t mode = 0; mode < modes.size(); ++mode) {
    cpu::allow_winograd(modes[mode]);
    auto t = bench::measure(p.run, seconds);
    cpu::allow_winograd(true);
    double rate = flops / (t.best_ms * 1e-3) * 1e-9;
    // By CPU time: the rate a busy machine stretches less (1 thread).
    double cpu_rate = flops / (t.best_cpu_ms * 1e-3) * 1e-9;
    std::printf("  %-6s %-10s %-6s isa=%-7s threads=%d  best %7.3f ms  "
                "median %7.3f ms  cpu %7.3f ms  %6.1f GFLOP/s  %3.0f%% of FMA "
                "peak  %6.1f GFLOP/s by cpu (%3.0f%% of %.0f by cpu)\n",
                l.name, p.name, modes[mode] ? "rule" : "direct",
                cpu::isa_name(), dev.threads(), t.best_ms,
                t.median_ms, t.best_cpu_ms, rate, 100.0 * rate / peak,
                cpu_rate, 100.0 * cpu_rate / cpu_peak, cpu_peak);
    sum_ms[mode] += t.best_ms;
  }
  return sum_ms;
}

pool2d_geometry convnet_pool(const conv2d_geometry& g) {
  auto p = pool2d_geometry::make(g.output_shape(), 3, 3, 2, 2, padding::same);
  if (!p) {
    std::fprintf(stderr, "%s\n", render(p.error()).c_str());
    std::exit(1);
  }
  return *p;
}

void bench_level(const bench::options& opt) {
  const int64_t batch = 128;
  auto g1 = same_conv({batch, 28, 28, 1}, {5, 5, 1, 16});
  auto g2 = same_conv({batch, 14, 14, 16}, {5, 5, 16, 16});
  std::vector<layer> layers{
    {"conv1", g1, convnet_pool(g1), false},
    {"conv2", g2, convnet_pool(g2), true},
  };
  for (int threads : opt.threads) {
    auto dev = make_cpu_backend(threads);
    auto peak = bench::fma_peak_gflops(cpu::isa_name(), threads, opt.seconds);
    std::printf("fma peak %s threads=%d  %.1f GFLOP/s\n", cpu::isa_name(),
                threads, peak);
    auto modes = opt.winograd_modes();
    std::vector<double> mode_ms(modes.size());
    double pool_ms = 0;
    double flops = 0;
    for (const auto& l : layers) {
      auto layer_ms = bench_layer(*dev, l, opt, peak, &pool_ms);
      for (size_t mode = 0; mode < modes.size(); ++mode)
        mode_ms[mode] += layer_ms[mode];
      flops += conv_flops(l.g) * (l.with_dx ? 3 : 2);
    }
    for (size_t mode = 0; mode < modes.size(); ++mode) {
    double ms = mode_ms[mode];
    double rate = flops / (ms * 1e-3) * 1e-9;
    // Direct-conv FLOPs over the time: Winograd's "GFLOP/s" are what the
    // direct conv would need to run at for the same time.
    std::printf("conv path %s isa=%s threads=%d  %.3f ms  %.1f GFLOP/s  "
                "%.0f%% of FMA peak (backward passes from a given ds)\n",
                modes[mode] ? "rule" : "direct", cpu::isa_name(), threads, ms,
                rate, 100.0 * rate / peak);
    std::printf("conv path + fused pool backwards %s isa=%s threads=%d  "
                "%.3f ms  (pools %.3f ms)\n",
                modes[mode] ? "rule" : "direct", cpu::isa_name(), threads,
                ms + pool_ms, pool_ms);
    }
    std::printf("\n");
  }
}

} // namespace

int main(int argc, char** argv) {
  auto opt = bench::parse_options(argc, argv);
  std::printf("conv passes of the ConvNet (batch 128, relu) as the step "
              "runs them: dw and dx from the ds the fused max-pool backward "
              "writes; best and median of %.1fs of calls; GFLOP/s from the "
              "best\n",
              opt.seconds);
  return bench::at_each_fma_level(opt, bench_level);
}
