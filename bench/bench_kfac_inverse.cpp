// Times the K-FAC inverse kernels on one thread at the factor sizes of the
// seeds' ConvNet: conv1 A 26 / G 16, conv2 A 401 / G 16, dense A 785 / G 10,
// and of the deep autoencoder's largest layer (A 1001 / G 784):
// damped_inverse (double Cholesky; damped_inverse_f32 in float) and
// symmetric_eigen (double SelfAdjointEigenSolver) of each factor, then the
// preconditioning paths of each layer's gradient (the explicit inverses'
// products also in bfloat16, on AMX tiles or AVX512-BF16, where the CPU
// has either). Last, fp32 against bf16 products on every layer of the
// deep autoencoder, the calls alternating and timed by process CPU time.
//
//   build/bin/bench_kfac_inverse [--seconds 0.5]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/bf16_gemm.hpp"
#include "kernels/cpu/kfac_inverse.hpp"
#include "bench/bench_util.hpp"
#include "bench/fma_peak.hpp"
#include "runtime/base/error.hpp"

using namespace syncfac;

namespace {

using bench::ok;
using bench::measure;
using bench::timing;

void report(const std::string& what, timing t) {
  std::printf("%-46s best %9.3f ms  median %9.3f ms\n", what.c_str(),
              t.best_ms, t.median_ms);
}

// A factor as the statistics code makes it: XᵀX / N over N rows of n
// values whose last column is the bias 1 (for A) — rank-deficient when
// N < n, as for a dense layer at batch 128.
tensor factor(int64_t n, int64_t rows, bool bias, std::mt19937& rng) {
  tensor x({rows, n});
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c)
      x[r * n + c] = bias && c == n - 1 ? 1.0f : dist(rng) * dist(rng);
  tensor f;
  auto dev = make_cpu_backend(1);
  ok(dev->gemm(x, true, x, false, 1.0f / static_cast<float>(rows), 0.0f, f));
  return f;
}

/// One factor of a layer and where its kernels' outputs go.
struct factor_outputs {
  const char* name; // "A" or "G"
  const tensor* factor;
  float damping;
  tensor* inverse;
  tensor* eigenvalues;
  tensor* eigenvectors;
  tensor* lower;
};

struct layer_shape {
  const char* name;
  int64_t in; // A is [in, in], bias included
  int64_t out;
  int64_t rows; // rows behind the statistics
};

tensor random_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  tensor m({rows, cols});
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < m.size(); ++i)
    m[i] = dist(rng);
  return m;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// precondition_factored against precondition_factored_bf16 on the deep
// autoencoder's layers ([in + 1, out]), the two calls alternating so that
// both see the same load on a shared machine, each timed by the process's
// CPU time (one thread: the products run on the calling thread); medians,
// and the products' rate (2 · (in · out² + in² · out) flops a call) as a
// share of the FP32 FMA peak by CPU time (bench/fma_peak.hpp) for fp32 and
// of twice it for bf16: vdpbf16ps does two products per float lane, and
// Zen 4 runs it at the zmm FMA's rate (a loop of independent vdpbf16ps
// measured 2.0x the FMA loop there).
void compare_precisions(double seconds) {
  auto backend = cpu::bf16_products_backend();
  if (!backend) {
    std::printf("fp32 against bf16 products: %s\n",
                render(backend.error()).c_str());
    return;
  }
  std::printf("fp32 against bf16 (%s) products, interleaved, process CPU "
              "time, medians:\n", cpu::to_string(*backend));
  // Before and after, the higher (a shared core only ever slows it down).
  auto peak = bench::fma_peak_cpu_gflops("avx512", 0.5);
  std::mt19937 rng(9);
  const std::pair<int64_t, int64_t> layers[] = {
    {785, 1000}, {1001, 500}, {501, 250}, {251, 30},
    {31, 250},   {251, 500},  {501, 1000}, {1001, 784}};
  double total32 = 0, total16 = 0, flops = 0;
  for (auto [in, out] : layers) {
    auto grad = random_matrix(in, out, rng);
    auto A_inv = random_matrix(in, in, rng);
    auto G_inv = random_matrix(out, out, rng);
    tensor out32, out16;
    auto fp32 = [&] {
      ok(cpu::precondition_factored(grad, A_inv, G_inv, 1.0f, out32));
    };
    auto bf16 = [&] {
      ok(cpu::precondition_factored_bf16(grad, A_inv, G_inv, 1.0f, out16));
    };
    fp32(); // warm-up: allocations, page faults
    bf16();
    std::vector<double> t32, t16;
    double spent = 0;
    while (spent < seconds || t32.size() < 5) {
      auto c0 = bench::cpu_ms();
      fp32();
      auto c1 = bench::cpu_ms();
      bf16();
      auto c2 = bench::cpu_ms();
      t32.push_back(c1 - c0);
      t16.push_back(c2 - c1);
      spent += (c2 - c0) * 1e-3;
    }
    auto m32 = median(t32), m16 = median(t16);
    double f = 2.0 * static_cast<double>(in * out * out + in * in * out);
    total32 += m32;
    total16 += m16;
    flops += f;
    std::printf("  [%4lld, %4lld]  fp32 %8.3f ms %6.1f GFLOP/s  bf16 %8.3f "
                "ms %6.1f GFLOP/s  %.2fx\n",
                static_cast<long long>(in), static_cast<long long>(out), m32,
                f / m32 * 1e-6, m16, f / m16 * 1e-6, m32 / m16);
  }
  std::printf("  all layers   fp32 %8.3f ms %6.1f GFLOP/s  bf16 %8.3f ms "
              "%6.1f GFLOP/s  %.2fx\n",
              total32, flops / total32 * 1e-6, total16,
              flops / total16 * 1e-6, total32 / total16);
  peak = std::max(peak, bench::fma_peak_cpu_gflops("avx512", 0.5));
  std::printf("  FP32 FMA peak (avx512, CPU time) %.1f GFLOP/s: fp32 products "
              "at %.0f%% of it, bf16 at %.0f%% of twice it\n",
              peak, 100 * flops / total32 * 1e-6 / peak,
              100 * flops / total16 * 1e-6 / (2 * peak));
}

} // namespace

int main(int argc, char** argv) {
  auto seconds = bench::parse_options(argc, argv).seconds;
  std::mt19937 rng(5);
  const float lambda = 1e-3f;
  for (auto s : {layer_shape{"conv1", 26, 16, 4096},
                 layer_shape{"conv2", 401, 16, 4096},
                 layer_shape{"dense", 785, 10, 128},
                 // The deep autoencoder's largest layer (its first and
                 // last are 785x1000 and 1001x784).
                 layer_shape{"autoencoder fc7", 1001, 784, 256}}) {
    auto A = factor(s.in, s.rows, true, rng);
    auto G = factor(s.out, s.rows, false, rng);
    auto plan = cpu::factored_damping(A, G, lambda, 1);
    tensor A_inv, G_inv, eA, QA, eG, QG, LA, LG, grad({s.in, s.out}), out;
    for (const auto& o :
         {factor_outputs{"A", &A, plan.a_damping, &A_inv, &eA, &QA, &LA},
          factor_outputs{"G", &G, plan.g_damping, &G_inv, &eG, &QG, &LG}}) {
      auto n = std::to_string(o.factor->dim(0));
      auto label = std::string{s.name} + " " + o.name + " " + n + "x" + n;
      auto time = [&](const char* kernel, const std::function<void()>& run) {
        report(kernel + (" " + label), measure(run, seconds));
      };
      time("damped_inverse", [&] {
        ok(cpu::damped_inverse(*o.factor, o.damping, *o.inverse));
      });
      time("damped_inverse_f32", [&] {
        ok(cpu::damped_inverse_f32(*o.factor, o.damping, *o.inverse));
      });
      time("damped_cholesky", [&] {
        ok(cpu::damped_cholesky(*o.factor, o.damping, *o.lower));
      });
      time("symmetric_eigen", [&] {
        ok(cpu::symmetric_eigen(*o.factor, *o.eigenvalues, *o.eigenvectors));
      });
    }
    auto shape = std::string{s.name} + " [" + std::to_string(s.in) + ", "
                 + std::to_string(s.out) + "]";
    report("precondition_factored " + shape, measure([&] {
             ok(cpu::precondition_factored(grad, A_inv, G_inv, 1.0f, out));
           }, seconds));
    // Both products in bfloat16, on the backend the CPU has.
    auto backend = cpu::bf16_products_backend();
    if (!backend)
      std::printf("%-46s (neither AMX nor AVX512-BF16 here)\n",
                  ("precondition_factored_bf16 " + shape).c_str());
    else
      report("precondition_factored_bf16 " + shape + " "
               + cpu::to_string(*backend), measure([&] {
               ok(cpu::precondition_factored_bf16(grad, A_inv, G_inv, 1.0f,
                                                  out));
             }, seconds));
    report("precondition_cholesky " + shape, measure([&] {
             ok(cpu::precondition_cholesky(grad, LA, LG, 1.0f, out));
           }, seconds));
    // As a PS shard runs it: the factors were checked when they arrived.
    report("precondition_cholesky trusted " + shape, measure([&] {
             ok(cpu::precondition_cholesky(grad, LA, LG, 1.0f, out,
                                           cpu::factor_scan::trusted));
           }, seconds));
    report("precondition_eigen " + shape, measure([&] {
             ok(cpu::precondition_eigen(grad, QA, eA, QG, eG, lambda, 1, out));
           }, seconds));
  }
  compare_precisions(seconds);
  return 0;
}
