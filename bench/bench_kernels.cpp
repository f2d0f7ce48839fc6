// Times the CPU kernels at the shapes of the seeds' ConvNet (batch 128) and
// plain GEMMs, for 1 and 2 threads, printing ms and effective GFLOP/s
// (2 * M * N * K per GEMM-equivalent), then a full ConvNet training step.
//
// The conv kernels' rates are also given as a share of the FP32 FMA peak
// measured at the same level and thread count (bench/fma_peak.hpp).
//
//   build/bin/bench_kernels [--threads 1,2] [--seconds 0.5] [--step-only]
//                           [--isa auto|avx2|avx512]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "bench/bench_util.hpp"
#include "bench/conv_bench.hpp"
#include "bench/fma_peak.hpp"
#include "kernels/cpu/isa.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;

namespace {

using bench::conv_flops;
using bench::ok;
using bench::random_tensor;
using bench::measure;
using bench::timing;

// The FMA peak at the selected level and the thread count being timed.
double fma_peak = 0;

// Prints one timing; with a reference rate (the best SGEMM rate at this
// thread count) also the share of it reached, and of the FMA peak.
void report(const std::string& what, int threads, timing t, double flops,
            double reference = 0) {
  std::printf("%-44s threads=%d  best %8.3f ms  median %8.3f ms", what.c_str(),
              threads, t.best_ms, t.median_ms);
  if (flops > 0) {
    double rate = flops / (t.best_ms * 1e-3) * 1e-9;
    std::printf("  %6.1f GFLOP/s", rate);
    if (reference > 0)
      std::printf(" (%3.0f%% of SGEMM)", 100.0 * rate / reference);
    if (fma_peak > 0)
      std::printf(" (%3.0f%% of FMA peak)", 100.0 * rate / fma_peak);
  }
  std::printf("\n");
}

// Times forward and backward (relu) of one convolution.
void bench_conv(backend& dev, const std::string& name,
                const conv2d_geometry& g, double seconds, bool with_dx,
                double sgemm) {
  bench::conv_operands c(g);
  auto act = activation::relu;
  auto fwd = measure(
    [&] { ok(dev.conv2d_forward(g, c.x, c.w, c.b, act, c.y)); }, seconds);
  report("conv2d fwd " + name, dev.threads(), fwd, conv_flops(g), sgemm);
  auto bwd = measure(
    [&] {
      ok(dev.conv2d_backward(g, c.x, c.w, c.y, c.dy, act, c.ds, c.dw, c.db,
                             with_dx ? &c.dx : nullptr));
    },
    seconds);
  report("conv2d bwd " + name + (with_dx ? " (dw+dx)" : " (dw only)"),
         dev.threads(), bwd, conv_flops(g) * (with_dx ? 2 : 1), sgemm);
}

double bench_gemm(backend& dev, int64_t m, int64_t n, int64_t k,
                  double seconds) {
  std::mt19937 rng(8);
  auto a = random_tensor({m, k}, rng, 1.0f);
  auto b = random_tensor({k, n}, rng, 1.0f);
  tensor c;
  auto t = measure([&] { ok(dev.gemm(a, false, b, false, 1, 0, c)); },
                   seconds);
  double flops = 2.0 * static_cast<double>(m * n * k);
  report("gemm " + std::to_string(m) + "x" + std::to_string(n) + "x"
           + std::to_string(k),
         dev.threads(), t, flops);
  return flops / (t.best_ms * 1e-3) * 1e-9;
}

// The seeds' ConvNet: conv 5x5x16 SAME + relu, maxpool 3x3/2 SAME, conv
// 5x5x16 SAME + relu, maxpool 3x3/2 SAME, dense 784 -> 10, softmax xent.
struct convnet {
  conv2d_geometry g1, g2;
  pool2d_geometry p1, p2;
  tensor x, w1, b1, w2, b2, w3, b3;
  label_vector labels;
  // activations and gradients, reused across steps
  tensor a1, h1, a2, h2, logits, probs, dlogits;
  tensor ds3, dw3, db3, dh2, ds2, dw2, db2, dh1, ds1, dw1, db1;
  std::vector<int32_t> arg1, arg2;
  float loss = 0;

  explicit convnet(int64_t batch) {
    std::mt19937 rng(9);
    g1 = bench::same_conv({batch, 28, 28, 1}, {5, 5, 1, 16});
    p1 = *pool2d_geometry::make(g1.output_shape(), 3, 3, 2, 2,
                                padding::same);
    g2 = bench::same_conv(p1.output_shape(), {5, 5, 16, 16});
    p2 = *pool2d_geometry::make(g2.output_shape(), 3, 3, 2, 2,
                                padding::same);
    x = random_tensor(g1.input_shape(), rng, 1.0f);
    w1 = random_tensor(g1.kernel_shape(), rng, 0.28f);
    b1 = tensor({16});
    w2 = random_tensor(g2.kernel_shape(), rng, 0.07f);
    b2 = tensor({16});
    w3 = random_tensor({784, 10}, rng, 0.05f);
    b3 = tensor({10});
    std::uniform_int_distribution<int32_t> label(0, 9);
    for (int64_t i = 0; i < batch; ++i)
      labels.push_back(label(rng));
  }

  // Calls f(name, op) for each op of one step, in order.
  template <class F>
  void for_each_op(backend& dev, float lr, F&& f) {
    auto relu = activation::relu;
    f("conv1 fwd", [&] { ok(dev.conv2d_forward(g1, x, w1, b1, relu, a1)); });
    f("pool1 fwd", [&] { ok(dev.max_pool_forward(p1, a1, h1, arg1)); });
    f("conv2 fwd", [&] { ok(dev.conv2d_forward(g2, h1, w2, b2, relu, a2)); });
    f("pool2 fwd", [&] { ok(dev.max_pool_forward(p2, a2, h2, arg2)); });
    f("dense fwd", [&] {
      h2.reshape({p2.batch, 784});
      ok(dev.dense_forward(h2, w3, b3, activation::identity, logits));
    });
    f("softmax fwd+bwd", [&] {
      ok(dev.softmax_xent_forward(logits, labels, probs, loss));
      ok(dev.softmax_xent_backward(probs, labels, dlogits));
    });
    f("dense bwd", [&] {
      ok(dev.dense_backward(h2, w3, logits, dlogits, activation::identity,
                            ds3, dw3, db3, &dh2));
      dh2.reshape(p2.output_shape());
    });
    // As model::backward_layers runs a conv before a max_pool: the pool
    // writes the conv's ds (through relu), the conv starts from it.
    f("pool2 bwd", [&] {
      h2.reshape(p2.output_shape()); // the pool's output, as the dense saw it
      ok(dev.max_pool_backward_activated(p2, dh2, arg2, h2, relu, ds2));
    });
    f("conv2 bwd", [&] {
      ok(dev.conv2d_backward_from_ds(g2, h1, w2, ds2, dw2, db2, &dh1));
    });
    f("pool1 bwd", [&] {
      ok(dev.max_pool_backward_activated(p1, dh1, arg1, h1, relu, ds1));
    });
    f("conv1 bwd", [&] {
      ok(dev.conv2d_backward_from_ds(g1, x, w1, ds1, dw1, db1, nullptr));
    });
    f("sgd", [&] {
      for (auto [p, d] : {std::pair{&w1, &dw1}, {&b1, &db1}, {&w2, &dw2},
                          {&b2, &db2}, {&w3, &dw3}, {&b3, &db3}})
        for (int64_t i = 0; i < p->size(); ++i)
          (*p)[i] -= lr * (*d)[i];
    });
  }

  void step(backend& dev, float lr) {
    for_each_op(dev, lr, [](const char*, auto&& op) { op(); });
  }

  // Per-op best times over `steps` steps.
  void breakdown(backend& dev, int steps) {
    std::vector<std::pair<std::string, double>> best;
    for (int s = 0; s < steps; ++s) {
      size_t i = 0;
      for_each_op(dev, 0.01f, [&](const char* name, auto&& op) {
        auto t0 = std::chrono::steady_clock::now();
        op();
        auto t1 = std::chrono::steady_clock::now();
        double ms
          = std::chrono::duration<double, std::milli>(t1 - t0).count();
        if (best.size() <= i)
          best.emplace_back(name, ms);
        best[i].second = std::min(best[i].second, ms);
        ++i;
      });
    }
    double sum = 0;
    double conv_ms = 0;
    std::printf("  per op (best of %d):", steps);
    for (auto& [name, ms] : best) {
      std::printf(" %s %.2f,", name.c_str(), ms);
      sum += ms;
      if (name.rfind("conv", 0) == 0)
        conv_ms += ms;
    }
    std::printf(" sum %.2f ms\n", sum);
    // The conv path: the step's four conv ops (conv1's backward without dx).
    double conv = conv_flops(g1) * 2 + conv_flops(g2) * 3;
    double rate = conv / (conv_ms * 1e-3) * 1e-9;
    std::printf("conv path threads=%d  %.2f ms  %.1f GFLOP/s", dev.threads(),
                conv_ms, rate);
    if (fma_peak > 0)
      std::printf("  %.0f%% of FMA peak", 100.0 * rate / fma_peak);
    std::printf("\n");
  }

  double flops() const {
    // forward convs + dense, backward dw for all, dx for conv2 and dense
    double dense = 2.0 * static_cast<double>(p2.batch) * 784 * 10;
    return 2 * conv_flops(g1) + 3 * conv_flops(g2) + 3 * dense;
  }
};

// Returns the best SGEMM rate in GFLOP/s.
double bench_gemms(backend& dev, double seconds) {
  double best = 0;
  for (int64_t n : {256, 512, 1024})
    best = std::max(best, bench_gemm(dev, n, n, n, seconds));
  bench_gemm(dev, 128, 10, 784, seconds); // the ConvNet's dense layer
  return best;
}

void bench_convs(backend& dev, int64_t batch, double seconds, double sgemm) {
  auto g1 = bench::same_conv({batch, 28, 28, 1}, {5, 5, 1, 16});
  auto g2 = bench::same_conv({batch, 14, 14, 16}, {5, 5, 16, 16});
  bench_conv(dev, "conv1 [128,28,28,1]*[5,5,1,16]", g1, seconds, false,
             sgemm);
  bench_conv(dev, "conv1 [128,28,28,1]*[5,5,1,16]", g1, seconds, true,
             sgemm);
  bench_conv(dev, "conv2 [128,14,14,16]*[5,5,16,16]", g2, seconds, true,
             sgemm);
}

void bench_step(backend& dev, int64_t batch, double seconds, double sgemm) {
  convnet net(batch);
  auto t = measure([&] { net.step(dev, 0.01f); }, 2 * seconds);
  report("convnet step (fwd+bwd+sgd, batch 128)", dev.threads(), t,
         net.flops(), sgemm);
  net.breakdown(dev, 20);
}

} // namespace

int main(int argc, char** argv) {
  auto opt = bench::parse_options(argc, argv);
  const int64_t batch = 128;
  std::printf("syncfac kernel bench, batch %lld, best and median of %.1fs "
              "of calls; GFLOP/s from the best; kernels at %s\n\n",
              static_cast<long long>(batch), opt.seconds, cpu::isa_name());
  for (int threads : opt.threads) {
    auto dev = make_cpu_backend(threads);
    fma_peak = bench::fma_peak_gflops(cpu::isa_name(), threads, opt.seconds);
    std::printf("fma peak %s threads=%d  %.1f GFLOP/s\n", cpu::isa_name(),
                threads, fma_peak);
    double sgemm = 0;
    if (!opt.step_only) {
      sgemm = bench_gemms(*dev, opt.seconds);
      bench_convs(*dev, batch, opt.seconds, sgemm);
    }
    bench_step(*dev, batch, opt.seconds, sgemm);
    std::printf("\n");
  }
  return 0;
}
