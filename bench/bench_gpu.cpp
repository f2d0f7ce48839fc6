// The GPU benchmark of bench/gpu_check.sh: one compact table of
//   - ConvNet training steps/s (forward, backward, SGD on the host) at
//     batch 128 and 1024 on the GPU against the CPU path, and the bytes a
//     GPU step copies between host and device,
//   - damped Cholesky inverse and eigendecomposition time of K-FAC factors
//     of size 512, 2048, 4096, 8192 on the GPU against the CPU (Eigen,
//     double, one thread as the inverse actors run it); CPU sizes above
//     --cpu-max-size are not run but extrapolated by n³ from the largest
//     measured size and marked "est",
//   - cuBLAS SGEMM TFLOP/s against the device's FP32 peak,
//   - batched GEMM (64 products of 256 x 256 matrices) TFLOP/s: the
//     backend's gemm_batched on the GPU against the CPU, and the
//     device-resident cublasSgemmStridedBatched against the peak.
// GPU times go through the backend interface and so include the host
// copies (a factor and its inverse cross PCIe once each), except the two
// "sgemm" lines, which time device-resident operands with CUDA events.
//
//   build-gpu/bin/bench_gpu [--device N] [--cpu-threads N]
//                           [--cpu-max-size N] [--seconds S]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/kfac_inverse.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "runtime/elapsed.hpp"
#include "runtime/base/error.hpp"
#include "runtime/model.hpp"

using namespace syncfac;

namespace {

using clock_type = std::chrono::steady_clock;

void ok(const caf::error& err, const char* what) {
  if (err) {
    std::fprintf(stderr, "bench_gpu: %s failed: %s\n", what,
                 render(err).c_str());
    std::exit(1);
  }
}

struct options {
  int device = 0;
  int cpu_threads = 0;
  int64_t cpu_max_size = 2048;
  double seconds = 2.0;
};

options parse(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 == argc) {
      std::fprintf(stderr, "bench_gpu: option %s needs a value\n", argv[i]);
      std::exit(2);
    }
    std::string name = argv[i];
    const char* value = argv[++i];
    if (name == "--device")
      opt.device = std::atoi(value);
    else if (name == "--cpu-threads")
      opt.cpu_threads = std::atoi(value);
    else if (name == "--cpu-max-size")
      opt.cpu_max_size = std::atoll(value);
    else if (name == "--seconds")
      opt.seconds = std::atof(value);
    else {
      std::fprintf(stderr, "bench_gpu: unknown option %s\n", name.c_str());
      std::exit(2);
    }
  }
  if (opt.cpu_threads <= 0)
    opt.cpu_threads = static_cast<int>(
      std::max(1u, std::thread::hardware_concurrency()));
  return opt;
}

/// Steps per second of the seeds' ConvNet on `dev`: at least 3 timed steps
/// after 2 warm-up steps, then until `seconds` have passed.
/// With bytes_per_step, also the bytes a step copied between host and GPU
/// (cuda::transfers; 0 on the CPU): the batch, and the parameters and
/// gradients the host updates, as in the runtime.
double convnet_steps_per_second(backend& dev, int64_t batch, double seconds,
                                double* bytes_per_step = nullptr) {
  auto made = model::make(model_spec{}, 1);
  ok(made ? caf::error{} : made.error(), "model::make");
  auto& net = **made;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, 9);
  tensor images({batch, 28, 28, 1});
  for (auto& v : images.values())
    v = pixel(rng);
  label_vector labels(static_cast<size_t>(batch));
  for (auto& l : labels)
    l = label(rng);
  auto step = [&] {
    auto res = net.forward_backward(dev, images, labels);
    ok(res ? caf::error{} : res.error(), "ConvNet step");
    auto& params = net.parameters();
    const auto& grads = net.gradients();
    for (size_t i = 0; i < params.size(); ++i) {
      float* p = params[i].value.data();
      const float* g = grads[i].value.data();
      for (int64_t k = 0; k < params[i].value.size(); ++k)
        p[k] -= 0.01f * g[k];
    }
  };
  step();
  step();
  int steps = 0;
  auto moved0 = cuda::transfers(dev);
  auto t0 = clock_type::now();
  while (steps < 3 || seconds_since(t0) < seconds) {
    step();
    ++steps;
  }
  auto elapsed = seconds_since(t0);
  auto moved = cuda::transfers(dev);
  if (bytes_per_step != nullptr)
    *bytes_per_step = static_cast<double>(moved.to_device - moved0.to_device
                                          + moved.to_host - moved0.to_host)
                      / steps;
  return steps / elapsed;
}

/// A K-FAC-like factor: (1/m) XᵀX of m = n/2 rows (rank-deficient, as a
/// factor from a small batch is), computed by the backend's GEMM.
tensor make_factor(backend& dev, int64_t n) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::normal_distribution<float> dist;
  auto m = std::max<int64_t>(1, n / 2);
  tensor x({m, n});
  for (auto& v : x.values())
    v = dist(rng);
  tensor f;
  ok(dev.gemm(x, true, x, false, 1.0f / static_cast<float>(m), 0.0f, f),
     "factor gemm");
  return f;
}

template <class F>
double best_time(int reps, F&& f) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    auto t0 = clock_type::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

std::string fmt(double x, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, x);
  return buf;
}

} // namespace

int main(int argc, char** argv) {
  auto opt = parse(argc, argv);
  auto count = cuda::device_count();
  if (opt.device >= count) {
    std::fprintf(stderr, "bench_gpu: no CUDA device %d (%d present)\n",
                 opt.device, count);
    return 77;
  }
  auto made = cuda::make_cuda_backend(opt.device);
  ok(made ? caf::error{} : made.error(), "make_cuda_backend");
  auto& gpu = **made;
  auto* kfac = cuda::kfac_of(gpu);
  auto cpu = make_cpu_backend(opt.cpu_threads);
  std::printf("device: %s\n", cuda::device_description(opt.device).c_str());
  std::printf("cpu: %d threads for the ConvNet; factor kernels on one thread "
              "(as the inverse actors run them)\n\n",
              opt.cpu_threads);

  std::printf("%-34s %14s %14s %9s\n", "benchmark", "gpu", "cpu", "gpu/cpu");
  std::printf("%-34s %14s %14s %9s\n", "---------", "---", "---", "-------");

  // ConvNet training steps.
  for (int64_t batch : {int64_t{128}, int64_t{1024}}) {
    double moved = 0;
    auto g = convnet_steps_per_second(gpu, batch, opt.seconds, &moved);
    auto c = convnet_steps_per_second(*cpu, batch, opt.seconds);
    std::printf("%-34s %14s %14s %8.1fx\n",
                ("convnet train steps/s, batch " + std::to_string(batch))
                  .c_str(),
                fmt(g, "%.1f").c_str(), fmt(c, "%.1f").c_str(), g / c);
    std::printf("%-34s %14s %14s %9s\n",
                ("  host<->gpu per step, batch " + std::to_string(batch))
                  .c_str(),
                fmt(moved / 1e6, "%.1f MB").c_str(), "-", "");
    std::fflush(stdout);
  }

  // Factor inverses and eigendecompositions.
  double cpu_inv_ref = 0, cpu_eig_ref = 0;
  int64_t cpu_ref_n = 0;
  for (int64_t n : {int64_t{512}, int64_t{2048}, int64_t{4096},
                    int64_t{8192}}) {
    auto f = make_factor(gpu, n);
    tensor out, e, q;
    int reps = n <= 2048 ? 3 : 1;
    // A first call sizes the device workspaces; time the steady state.
    ok(kfac->damped_inverse(f, 1e-3f, out), "gpu damped_inverse");
    auto g_inv = best_time(reps, [&] {
      ok(kfac->damped_inverse(f, 1e-3f, out), "gpu damped_inverse");
    });
    ok(kfac->symmetric_eigen(f, e, q), "gpu symmetric_eigen");
    auto g_eig = best_time(reps == 3 ? 2 : 1, [&] {
      ok(kfac->symmetric_eigen(f, e, q), "gpu symmetric_eigen");
    });
    std::string c_inv_s, c_eig_s;
    double c_inv, c_eig;
    if (n <= opt.cpu_max_size) {
      c_inv = best_time(1, [&] {
        ok(cpu::damped_inverse(f, 1e-3f, out), "cpu damped_inverse");
      });
      c_eig = best_time(1, [&] {
        ok(cpu::symmetric_eigen(f, e, q), "cpu symmetric_eigen");
      });
      cpu_inv_ref = c_inv;
      cpu_eig_ref = c_eig;
      cpu_ref_n = n;
      c_inv_s = fmt(c_inv * 1e3, "%.1f ms");
      c_eig_s = fmt(c_eig * 1e3, "%.1f ms");
    } else {
      auto r = std::pow(static_cast<double>(n) / cpu_ref_n, 3.0);
      c_inv = cpu_inv_ref * r;
      c_eig = cpu_eig_ref * r;
      c_inv_s = fmt(c_inv, "est %.0f s");
      c_eig_s = fmt(c_eig, "est %.0f s");
    }
    std::printf("%-34s %14s %14s %8.1fx\n",
                ("cholesky inverse n=" + std::to_string(n)).c_str(),
                fmt(g_inv * 1e3, "%.1f ms").c_str(), c_inv_s.c_str(),
                c_inv / g_inv);
    std::printf("%-34s %14s %14s %8.1fx\n",
                ("eigendecomposition n=" + std::to_string(n)).c_str(),
                fmt(g_eig * 1e3, "%.1f ms").c_str(), c_eig_s.c_str(),
                c_eig / g_eig);
    std::fflush(stdout);
  }

  // SGEMM against the peak.
  auto peak = cuda::fp32_peak_tflops(opt.device);
  std::string peak_note = "SMs x clock x 128 x 2";
  if (peak <= 0) {
    peak = 67.0;
    peak_note = "H200 SXM stated FP32 peak";
  }
  for (int64_t n : {int64_t{4096}, int64_t{8192}}) {
    auto s = cuda::device_sgemm_seconds(opt.device, n, 5);
    ok(s ? caf::error{} : s.error(), "device sgemm");
    auto tflops = 2.0 * n * n * n / *s / 1e12;
    std::printf("%-34s %14s %14s %8.0f%%\n",
                ("sgemm TFLOP/s n=" + std::to_string(n) + " (of peak)")
                  .c_str(),
                fmt(tflops, "%.1f").c_str(), fmt(peak, "peak %.1f").c_str(),
                100.0 * tflops / peak);
  }

  // Batched GEMM: many small products, as towers or layers sharing a shape
  // run them. Through the backend both ways (the GPU's time includes the
  // host copies of a, b and c, 48 MiB), then on device-resident operands.
  {
    constexpr int64_t batch = 64;
    constexpr int64_t n = 256;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    tensor a({batch, n, n});
    tensor b({batch, n, n});
    for (auto* x : {&a, &b})
      for (auto& v : x->values())
        v = dist(rng);
    tensor c;
    auto flops = 2.0 * batch * n * n * n;
    auto tflops_of = [&](backend& dev, const char* what) {
      auto product = [&] {
        ok(dev.gemm_batched(a, false, b, false, 1.0f, 0.0f, c), what);
      };
      product(); // sizes the device buffers
      return flops / best_time(5, product) / 1e12;
    };
    auto gpu_tflops = tflops_of(gpu, "gpu gemm_batched");
    auto cpu_tflops = tflops_of(*cpu, "cpu gemm_batched");
    std::printf("%-34s %14s %14s %8.1fx\n", "gemm_batched TFLOP/s 64x256^3",
                fmt(gpu_tflops, "%.2f").c_str(),
                fmt(cpu_tflops, "%.2f").c_str(), gpu_tflops / cpu_tflops);
    auto seconds = cuda::device_sgemm_seconds(opt.device, n, 5, batch);
    ok(seconds ? caf::error{} : seconds.error(), "device batched sgemm");
    auto device_tflops = flops / *seconds / 1e12;
    std::printf("%-34s %14s %14s %8.0f%%\n",
                "batched sgemm 64x256^3 (of peak)",
                fmt(device_tflops, "%.1f").c_str(),
                fmt(peak, "peak %.1f").c_str(), 100.0 * device_tflops / peak);
  }
  std::printf("\nnotes: peak = %s; gpu inverse/eigen and gemm_batched times "
              "include the host copies of their operands and results; cpu "
              "factor sizes above %lld are extrapolated by n^3 (est), not "
              "run; \"gpu/cpu\" is the speed-up.\n",
              peak_note.c_str(), static_cast<long long>(opt.cpu_max_size));
  return 0;
}
