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
#include "runtime/error.hpp"

using namespace syncfac;

namespace {

struct options {
  std::vector<int> threads{1, 2};
  double seconds = 1.0; // per measurement
};

options parse(int argc, char** argv) {
  options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--seconds") == 0) {
      opt.seconds = std::atof(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--threads") == 0) {
      opt.threads.clear();
      for (char* tok = std::strtok(argv[i + 1], ","); tok != nullptr;
           tok = std::strtok(nullptr, ","))
        opt.threads.push_back(std::atoi(tok));
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      std::exit(2);
    }
  }
  return opt;
}

void ok(const caf::error& err) {
  if (err) {
    std::fprintf(stderr, "kernel failed: %s\n", render(err).c_str());
    std::exit(1);
  }
}

tensor random(const tensor_shape& shape, std::mt19937& rng, float scale) {
  tensor t(shape);
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (auto& v : t.values())
    v = dist(rng);
  return t;
}

// Best and median per-call wall milliseconds over about `seconds` (the
// machine is shared, so the best is the figure to compare), and the best
// process CPU milliseconds per call: on busy cores the wall time includes
// waiting for a core, the CPU time does not.
struct timing {
  double best_ms;
  double median_ms;
  double best_cpu_ms;
};

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3
         + static_cast<double>(ts.tv_nsec) * 1e-6;
}

timing measure(double seconds, const std::function<void()>& f) {
  using clock = std::chrono::steady_clock;
  f(); // warm-up: allocations, page faults, OpenMP team
  std::vector<double> samples;
  double best_cpu = 1e300;
  auto start = clock::now();
  do {
    auto t0 = clock::now();
    auto c0 = cpu_ms();
    f();
    best_cpu = std::min(best_cpu, cpu_ms() - c0);
    samples.push_back(
      std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  } while (std::chrono::duration<double>(clock::now() - start).count()
             < seconds
           || samples.size() < 3);
  std::sort(samples.begin(), samples.end());
  return {samples.front(), samples[samples.size() / 2], best_cpu};
}

void report(const char* what, int threads, const timing& t, double flops) {
  std::printf("%-34s threads=%d  best %8.2f ms  median %8.2f ms  "
              "%6.1f GFLOP/s  cpu %8.2f ms\n",
              what, threads, t.best_ms, t.median_ms,
              flops / (t.best_ms * 1e-3) * 1e-9, t.best_cpu_ms);
}

} // namespace

int main(int argc, char** argv) {
  auto opt = parse(argc, argv);
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
  tensor A, G;
  for (int threads : opt.threads) {
    report("conv2 A+G (25088 x 401, O 16)", threads,
           measure(opt.seconds,
                   [&] {
                     ok(cpu::conv_factors(*g, x, ds, true, {}, threads, A,
                                          G));
                   }),
           conv_flops);
    cpu::factor_sampling s;
    s.max_locations = 16;
    s.seed = 1;
    report("conv2 A+G, 16 of 196 locations", threads,
           measure(opt.seconds,
                   [&] {
                     ok(cpu::conv_factors(*g, x, ds, true, s, threads, A,
                                          G));
                   }),
           conv_flops * 16.0 / 196.0);
    report("conv0 A+G (100352 x 26, O 16)", threads,
           measure(opt.seconds,
                   [&] {
                     ok(cpu::conv_factors(*g0, x0, ds0, true, {}, threads, A,
                                          G));
                   }),
           conv0_flops);
    report("fc4 A+G (128 x 785, O 10)", threads,
           measure(opt.seconds,
                   [&] {
                     ok(cpu::dense_factors(dx, dds, true, {}, threads, A,
                                           G));
                   }),
           dense_flops);
  }
  return 0;
}
