#pragma once

// Portable seeded randomness for the data layer. std::mt19937_64 is fully
// specified by the standard but the std:: distributions are not, so anything
// that must be reproducible across standard libraries (shuffles that a
// checkpoint resumes, fake data that tests compare bytewise) draws raw
// 64-bit values and maps them itself.

#include <cstdint>
#include <random>

namespace syncfac {

/// SplitMix64's finaliser: spreads nearby inputs (seed, seed + 1) into
/// unrelated 64-bit values before they seed an engine.
constexpr uint64_t mix_seed(uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Combines several values into one seed; order matters.
constexpr uint64_t mix_seed(uint64_t a, uint64_t b) noexcept {
  return mix_seed(mix_seed(a) ^ b);
}

/// A uniform value in [0, n) for n >= 1, without modulo bias (rejection).
inline uint64_t uniform_below(std::mt19937_64& rng, uint64_t n) noexcept {
  // The largest multiple of n that fits: values at or above it are redrawn.
  auto limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % n;
}

} // namespace syncfac
