#pragma once

// What the micro-benchmarks share: option parsing, failing loudly on a
// kernel error, and timing that reports the best and median wall time per
// call plus the best process CPU time (on busy shared cores the wall time
// includes waiting for a core; the CPU time does not).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "kernels/cpu/isa.hpp"
#include "runtime/base/error.hpp"

namespace syncfac::bench {

struct options {
  std::vector<int> threads{1, 2};
  /// Seconds per measurement.
  double seconds = 0.5;
  /// bench_kernels: time only the full ConvNet step.
  bool step_only = false;
  /// The CPU kernels' instruction-set level (kernels/cpu/isa.hpp).
  std::string isa = "auto";
  /// The conv benchmarks' algorithms (kernels/cpu/winograd.hpp): "rule"
  /// (the library's choice), "direct" (Winograd off) or "both", each pass
  /// timed direct and then by the rule, interleaved.
  std::string winograd = "rule";

  /// The Winograd permissions to time each pass under, in order.
  std::vector<bool> winograd_modes() const {
    if (winograd == "both")
      return {false, true};
    return {winograd != "direct"};
  }
};

/// --seconds S, --threads 1,2, --isa LEVEL and --step-only; anything else
/// exits with 2 (a level this build or CPU lacks too, naming it).
inline options parse_options(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--step-only") == 0) {
      opt.step_only = true;
    } else if (i + 1 == argc) {
      std::fprintf(stderr, "option %s needs a value\n", argv[i]);
      std::exit(2);
    } else if (std::strcmp(argv[i], "--isa") == 0) {
      opt.isa = argv[++i];
    } else if (std::strcmp(argv[i], "--winograd") == 0) {
      opt.winograd = argv[++i];
      if (opt.winograd != "rule" && opt.winograd != "direct"
          && opt.winograd != "both") {
        std::fprintf(stderr, "--winograd %s: expected rule, direct or both\n",
                     opt.winograd.c_str());
        std::exit(2);
      }
    } else if (std::strcmp(argv[i], "--seconds") == 0) {
      opt.seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--threads") == 0) {
      opt.threads.clear();
      for (char* tok = std::strtok(argv[++i], ","); tok != nullptr;
           tok = std::strtok(nullptr, ","))
        opt.threads.push_back(std::atoi(tok));
    } else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (auto err = cpu::select_isa(opt.isa)) {
    std::fprintf(stderr, "%s\n", render(err).c_str());
    std::exit(2);
  }
  return opt;
}

inline void ok(const caf::error& err) {
  if (err) {
    std::fprintf(stderr, "kernel failed: %s\n", render(err).c_str());
    std::exit(1);
  }
}

struct timing {
  double best_ms = 0;
  double median_ms = 0;
  double best_cpu_ms = 0;
};

inline double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3
         + static_cast<double>(ts.tv_nsec) * 1e-6;
}

/// Runs f for about `seconds` (and at least `min_samples` times) after a
/// warm-up call; the machine is shared, so the best is the least disturbed
/// figure.
inline timing measure(const std::function<void()>& f, double seconds,
                      size_t min_samples = 3) {
  using clock = std::chrono::steady_clock;
  f(); // warm-up: allocations, page faults, the OpenMP team
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
           || samples.size() < min_samples);
  std::sort(samples.begin(), samples.end());
  return {samples.front(), samples[samples.size() / 2], best_cpu};
}

} // namespace syncfac::bench
