#pragma once

// The benchmark-only device "bench_delay": its compute is a delay drawn per
// step, so that a benchmark measures the sync protocol alone (chief,
// shards, N workers) or the effect of stragglers (docs/benchmarks-history.md,
// "Hundreds of workers" and "Stragglers"). Spelled as a --device value:
//
//   bench_delay:MS                 every step takes MS milliseconds
//   bench_delay:MS:lognormal:SIGMA MS times a log-normal factor of mean 1
//   bench_delay:MS:pareto:ALPHA    MS times a Pareto factor of mean 1
//                                  (ALPHA > 1; heavier tail as ALPHA -> 1)
//   any of them, then :random      the gradients are random values instead
//                                  of zeros
//
// The name says it is for benchmarks: its gradients are zeros, or with
// :random non-zero values of the model's shapes drawn once per device from
// its seed, so that what crosses the wire is a real payload's bytes
// (docs/benchmarks.md, "Hundreds of workers over sockets").

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include <caf/expected.hpp>

namespace syncfac {

struct compute_delay {
  enum class tail { none, lognormal, pareto };

  double ms = 0;
  tail dist = tail::none;
  /// SIGMA of the log-normal, ALPHA of the Pareto.
  double shape = 0;
  /// :random: non-zero gradients instead of zeros.
  bool random_gradients = false;

  /// One step's delay.
  std::chrono::microseconds draw(std::mt19937_64& rng) const;
};

/// Whether `device` names the benchmark delay device.
bool is_delay_device(const std::string& device);

/// Parses a bench_delay device; anything malformed is ec::invalid_config
/// naming the value and the accepted forms.
caf::expected<compute_delay> parse_compute_delay(const std::string& device);

} // namespace syncfac
