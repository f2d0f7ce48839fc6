// The ConvNet's convolutions pass by pass (forward, weight gradient, input
// gradient) at every instruction-set level this CPU has and each thread
// count: GFLOP/s of the best call, the median, the best process CPU time,
// and the share of the FP32 FMA peak measured at the same level and thread
// count (bench/fma_peak.hpp). docs/benchmarks.md, "Conv passes at the peak".
//
//   build/bin/bench_conv_passes [--threads 1,2] [--seconds 0.5]
//                               [--isa auto|avx2|avx512]
//
// --isa auto (the default) runs every supported level from the lowest;
// a named level runs that one only. The weight-gradient pass is
// conv2d_backward without dx, the input-gradient pass conv2d_backward_data:
// both include the activation gradient (ds), as the step does; "ds" times
// that alone, in GB/s (the memory traffic the backward passes cannot
// avoid).

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "bench/conv_bench.hpp"
#include "bench/fma_peak.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/isa.hpp"

using namespace syncfac;

namespace {

using bench::conv_flops;
using bench::ok;
using bench::same_conv;

struct layer {
  const char* name;
  conv2d_geometry g;
  bool with_dx; // the step computes its input gradient
};

// Times the passes of one layer; returns the summed best ms of the passes
// the ConvNet step runs.
double bench_layer(backend& dev, const layer& l, double seconds,
                   double peak) {
  const auto& g = l.g;
  bench::conv_operands c(g);
  auto act = activation::relu;
  ok(dev.conv2d_forward(g, c.x, c.w, c.b, act, c.y));
  struct pass {
    const char* name;
    std::function<void()> run;
  };
  std::vector<pass> passes{
    {"fwd", [&] { ok(dev.conv2d_forward(g, c.x, c.w, c.b, act, c.y)); }},
    {"dw", [&] {
       ok(dev.conv2d_backward(g, c.x, c.w, c.y, c.dy, act, c.ds, c.dw, c.db,
                              nullptr));
     }},
  };
  if (l.with_dx)
    passes.push_back(
      {"dx", [&] {
         ok(dev.conv2d_backward_data(g, c.x, c.w, c.y, c.dy, act, c.ds,
                                     &c.dx));
       }});
  // The activation gradient alone (ds = dy * relu'(y), no convolution):
  // the memory floor under the backward passes, which read y and dy and
  // write ds too.
  auto elementwise = bench::measure(
    [&] {
      ok(dev.conv2d_backward_data(g, c.x, c.w, c.y, c.dy, act, c.ds,
                                  nullptr));
    },
    seconds);
  double bytes = 3.0 * 4.0 * static_cast<double>(c.y.size());
  std::printf("  %-6s ds  isa=%-7s threads=%d  best %7.3f ms  median "
              "%7.3f ms  cpu %7.3f ms  %6.1f GB/s (y, dy read, ds "
              "written)\n",
              l.name, cpu::isa_name(), dev.threads(), elementwise.best_ms,
              elementwise.median_ms, elementwise.best_cpu_ms,
              bytes / (elementwise.best_ms * 1e-3) * 1e-9);
  double flops = conv_flops(g);
  double sum_ms = 0;
  for (auto& p : passes) {
    auto t = bench::measure(p.run, seconds);
    double rate = flops / (t.best_ms * 1e-3) * 1e-9;
    std::printf("  %-6s %-3s isa=%-7s threads=%d  best %7.3f ms  median "
                "%7.3f ms  cpu %7.3f ms  %6.1f GFLOP/s  %3.0f%% of FMA "
                "peak\n",
                l.name, p.name, cpu::isa_name(), dev.threads(), t.best_ms,
                t.median_ms, t.best_cpu_ms, rate, 100.0 * rate / peak);
    sum_ms += t.best_ms;
  }
  return sum_ms;
}

void bench_level(const bench::options& opt) {
  const int64_t batch = 128;
  std::vector<layer> layers{
    {"conv1", same_conv({batch, 28, 28, 1}, {5, 5, 1, 16}), false},
    {"conv2", same_conv({batch, 14, 14, 16}, {5, 5, 16, 16}), true},
  };
  for (int threads : opt.threads) {
    auto dev = make_cpu_backend(threads);
    auto peak = bench::fma_peak_gflops(cpu::isa_name(), threads, opt.seconds);
    std::printf("fma peak %s threads=%d  %.1f GFLOP/s\n", cpu::isa_name(),
                threads, peak);
    double ms = 0;
    double flops = 0;
    for (const auto& l : layers) {
      ms += bench_layer(*dev, l, opt.seconds, peak);
      flops += conv_flops(l.g) * (l.with_dx ? 3 : 2);
    }
    double rate = flops / (ms * 1e-3) * 1e-9;
    std::printf("conv path isa=%s threads=%d  %.3f ms  %.1f GFLOP/s  %.0f%% "
                "of FMA peak\n\n",
                cpu::isa_name(), threads, ms, rate, 100.0 * rate / peak);
  }
}

} // namespace

int main(int argc, char** argv) {
  auto opt = bench::parse_options(argc, argv);
  std::printf("conv passes of the ConvNet (batch 128, relu), best and median "
              "of %.1fs of calls; GFLOP/s from the best\n",
              opt.seconds);
  std::vector<std::string> levels{opt.isa};
  if (opt.isa == "auto")
    levels = cpu::supported_isas();
  for (const auto& level : levels) {
    if (bench::fma_width(level) == 0)
      continue; // no FMA peak to hold it to (generic)
    if (auto err = cpu::select_isa(level)) {
      std::fprintf(stderr, "%s\n", render(err).c_str());
      return 2;
    }
    bench_level(opt);
  }
  return 0;
}
