#pragma once

// The FP32 FMA peak of this machine per instruction-set level: independent
// FMA chains in registers (no memory traffic), on 1..N threads at once.
// bench_fma_peak prints it; bench_kernels divides the conv kernels' rate by
// it. Each level's loop is compiled for that level alone (a target
// attribute), so this runs on any x86-64-v3 CPU; a level the CPU lacks
// (kernels/cpu/isa.hpp's supported_isas) must not be asked for.

#include <chrono>
#include <cstdio>
#include <ctime>
#include <immintrin.h>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.hpp"
#include "kernels/cpu/isa.hpp"

namespace syncfac::bench {

// Enough chains to cover FMA latency (4 cycles) on two FMA ports (2 * 4 =
// 8) with margin, and few enough to stay in registers with the two
// operands: 12 of AVX2's 16 ymm (16 spilled and read ~100 of a ~120
// GFLOP/s peak), 16 of AVX-512's 32 zmm. Every chain x = x * a + b stays
// near b / (1 - a).
constexpr int avx2_chains = 12;
constexpr int avx512_chains = 16;

__attribute__((target("avx2,fma"))) inline double
fma_loop_avx2(long iterations) {
  constexpr int fma_chains = avx2_chains;
  __m256 acc[fma_chains];
  for (int i = 0; i < fma_chains; ++i)
    acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  auto a = _mm256_set1_ps(0.999f);
  auto b = _mm256_set1_ps(1e-3f);
  for (long n = 0; n < iterations; ++n)
    for (int i = 0; i < fma_chains; ++i)
      acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  float out[8];
  auto sum = acc[0];
  for (int i = 1; i < fma_chains; ++i)
    sum = _mm256_add_ps(sum, acc[i]);
  _mm256_storeu_ps(out, sum);
  return out[0]; // keeps the loop alive
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))) inline double
fma_loop_avx512(long iterations) {
  constexpr int fma_chains = avx512_chains;
  __m512 acc[fma_chains];
  for (int i = 0; i < fma_chains; ++i)
    acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  auto a = _mm512_set1_ps(0.999f);
  auto b = _mm512_set1_ps(1e-3f);
  for (long n = 0; n < iterations; ++n)
    for (int i = 0; i < fma_chains; ++i)
      acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  auto sum = acc[0];
  for (int i = 1; i < fma_chains; ++i)
    sum = _mm512_add_ps(sum, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, sum);
  return out[0]; // keeps the loop alive
}

/// Floats per vector of `level` ("avx2" or "avx512"); 0 for any other.
inline int fma_width(const std::string& level) {
  return level == "avx512" ? 16 : level == "avx2" ? 8 : 0;
}

/// GFLOP/s (2 per lane per FMA) of `threads` threads each running `level`'s
/// loop for about `seconds`; the best of `repeats` tries (a shared machine
/// only ever slows a try down).
inline double fma_peak_gflops(const std::string& level, int threads,
                              double seconds, int repeats = 3) {
  auto width = fma_width(level);
  if (width == 0)
    return 0;
  auto run = [&](long iterations) {
    return level == "avx512" ? fma_loop_avx512(iterations)
                             : fma_loop_avx2(iterations);
  };
  // Calibrate: iterations for ~seconds on one thread.
  long iterations = 1 << 20;
  using clock = std::chrono::steady_clock;
  for (;;) {
    auto t0 = clock::now();
    volatile double sink = run(iterations);
    (void) sink;
    double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s >= seconds / 4 || iterations > (1L << 40))
      break;
    iterations *= 2;
  }
  iterations *= 4;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    std::vector<std::thread> team;
    std::vector<double> sinks(static_cast<size_t>(threads));
    auto t0 = clock::now();
    for (int t = 0; t < threads; ++t)
      team.emplace_back([&, t] { sinks[static_cast<size_t>(t)] = run(iterations); });
    for (auto& th : team)
      th.join();
    double s = std::chrono::duration<double>(clock::now() - t0).count();
    int chains = level == "avx512" ? avx512_chains : avx2_chains;
    double flops = 2.0 * width * chains * static_cast<double>(iterations)
                   * threads;
    best = std::max(best, flops / s * 1e-9);
  }
  return best;
}

/// The one-thread peak by the calling thread's CPU time (best of `repeats`
/// tries of about `seconds`): what this thread's core delivers while it
/// runs, which on a machine whose cores are shared with other work (SMT
/// siblings, a host's other guests) can be half the quiet figure; a pass's
/// rate by CPU time is divided by this one.
inline double fma_peak_cpu_gflops(const std::string& level, double seconds,
                                  int repeats = 3) {
  auto width = fma_width(level);
  if (width == 0)
    return 0;
  auto cpu_now = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
  };
  auto run = [&](long iterations) {
    return level == "avx512" ? fma_loop_avx512(iterations)
                             : fma_loop_avx2(iterations);
  };
  int chains = level == "avx512" ? avx512_chains : avx2_chains;
  long iterations = 1 << 20;
  double best = 0;
  for (int r = 0; r < repeats;) {
    double t0 = cpu_now();
    volatile double sink = run(iterations);
    (void) sink;
    double s = cpu_now() - t0;
    if (s < seconds / 4 && iterations < (1L << 40)) {
      iterations *= 2; // still calibrating
      continue;
    }
    best = std::max(best, 2.0 * width * chains * static_cast<double>(iterations)
                            / s * 1e-9);
    ++r;
  }
  return best;
}

/// Runs `bench_level(opt)` at each instruction-set level `opt.isa` names
/// (every level this CPU has for "auto") that has an FMA peak to hold the
/// kernels to, with the CPU kernels switched to it first. The program's
/// exit code: 2 when a level cannot be selected (said on stderr), else 0.
template <class BenchLevel>
int at_each_fma_level(const options& opt, BenchLevel bench_level) {
  std::vector<std::string> levels{opt.isa};
  if (opt.isa == "auto")
    levels = cpu::supported_isas();
  for (const auto& level : levels) {
    if (fma_width(level) == 0)
      continue; // no FMA peak to hold it to (generic)
    if (auto err = cpu::select_isa(level)) {
      std::fprintf(stderr, "%s\n", render(err).c_str());
      return 2;
    }
    bench_level(opt);
  }
  return 0;
}

} // namespace syncfac::bench
