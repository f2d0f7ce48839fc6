// bfloat16 products on AMX tiles (kernels/cpu/bf16_gemm.hpp) against a
// reference that rounds the same inputs to bfloat16 (nearest even) and sums
// in double. Skips (tests/hardware_skip.hpp) where the CPU or OS lacks AMX,
// after checking that the refusal names what is missing.
//
// Tolerance: |amx - reference| <= 1e-5 · Σₖ|aᵢₖ bₖⱼ| per element. The tiles
// sum the products in float in another order (pairs, then 32 at a time):
// ~√k · 6e-8 of the magnitudes (2e-6 at k = 1024). Inputs rounded the wrong
// way (truncated) or not at all are off by ~1e-3 of them, a wrong pair,
// lane, tile or padding by O(1).

#define BOOST_TEST_MODULE kernels_bf16_gemm
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/bf16_gemm.hpp"
#include "runtime/base/error.hpp"
#include "tests/hardware_skip.hpp"

int main(int argc, char* argv[]) {
  if (auto err = syncfac::cpu::amx_bf16_ready()) {
    auto text = syncfac::render(err);
    // The refusal must say what it is about.
    if (text.find("bfloat16 products on AMX") == std::string::npos) {
      std::printf("the refusal does not name what it is about: %s\n",
                  text.c_str());
      return 1;
    }
    syncfac::test::skip_for_missing(syncfac::test::missing_hardware::cpu_level,
                                    text);
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}

using namespace syncfac;

namespace {

float bf16_round(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

float bf16_truncate(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits &= 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng{seed};
  std::uniform_real_distribution<float> u{-1.0f, 1.0f};
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (auto& x : m)
    x = u(rng);
  return m;
}

struct reference {
  std::vector<double> value;     // alpha · round(a) round(b), in double
  std::vector<double> magnitude; // alpha · Σ |a||b|
};

template <class Round>
reference product(const std::vector<float>& a, const std::vector<float>& b,
                  int64_t m, int64_t k, int64_t n, float alpha, Round round) {
  reference r;
  r.value.assign(static_cast<size_t>(m * n), 0.0);
  r.magnitude.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      double x = round(a[static_cast<size_t>(i * k + p)]);
      for (int64_t j = 0; j < n; ++j) {
        double y = round(b[static_cast<size_t>(p * n + j)]);
        r.value[static_cast<size_t>(i * n + j)] += alpha * x * y;
        r.magnitude[static_cast<size_t>(i * n + j)]
          += std::abs(alpha * x * y);
      }
    }
  return r;
}

// max over the entries of |c - ref| / Σ|a||b|.
double worst(const std::vector<float>& c, const reference& ref) {
  double w = 0;
  for (size_t i = 0; i < c.size(); ++i)
    w = std::max(w, std::abs(c[i] - ref.value[i])
                      / std::max(ref.magnitude[i], 1e-30));
  return w;
}

std::vector<float> amx(const std::vector<float>& a, const std::vector<float>& b,
                       int64_t m, int64_t k, int64_t n, float alpha) {
  std::vector<float> c(static_cast<size_t>(m * n), -7.0f);
  cpu::matmul_bf16(a.data(), b.data(), m, k, n, alpha, c.data());
  return c;
}

constexpr double tolerance = 1e-5;

struct shape {
  int64_t m, k, n;
};

} // namespace

BOOST_AUTO_TEST_CASE(products_of_every_shape_match_the_rounded_reference) {
  // Sizes around the tiles' 16 and the blocks' 32, and the autoencoder's
  // layers ([785, 1000] against its inverses).
  const shape shapes[] = {{1, 1, 1},     {16, 32, 16},  {17, 33, 15},
                          {31, 1, 64},   {32, 64, 32},  {45, 100, 7},
                          {100, 251, 31}, {251, 500, 251}, {785, 1000, 30}};
  uint32_t seed = 1;
  for (auto s : shapes) {
    auto a = random_matrix(s.m, s.k, seed++);
    auto b = random_matrix(s.k, s.n, seed++);
    auto c = amx(a, b, s.m, s.k, s.n, 0.5f);
    auto ref = product(a, b, s.m, s.k, s.n, 0.5f, bf16_round);
    BOOST_TEST_INFO("shape " << s.m << " x " << s.k << " x " << s.n);
    BOOST_TEST(worst(c, ref) <= tolerance);
  }
}

BOOST_AUTO_TEST_CASE(the_inputs_are_rounded_to_nearest_even) {
  // The reference of truncated or unrounded inputs is far off: the check
  // above could tell a wrong rounding.
  int64_t m = 64, k = 512, n = 48;
  auto a = random_matrix(m, k, 11);
  auto b = random_matrix(k, n, 12);
  auto c = amx(a, b, m, k, n, 1.0f);
  BOOST_TEST(worst(c, product(a, b, m, k, n, 1.0f, bf16_round)) <= tolerance);
  BOOST_TEST(worst(c, product(a, b, m, k, n, 1.0f, bf16_truncate))
             > 10 * tolerance);
  BOOST_TEST(worst(c, product(a, b, m, k, n, 1.0f, [](float x) { return x; }))
             > 10 * tolerance);
}

BOOST_AUTO_TEST_CASE(threads_compute_with_their_own_tiles) {
  // Each thread configures its own tiles: products on two threads at once
  // give the bits of the same products on one.
  int64_t m = 200, k = 300, n = 70;
  auto a0 = random_matrix(m, k, 21), b0 = random_matrix(k, n, 22);
  auto a1 = random_matrix(m, k, 23), b1 = random_matrix(k, n, 24);
  auto alone0 = amx(a0, b0, m, k, n, 1.0f);
  auto alone1 = amx(a1, b1, m, k, n, 1.0f);
  for (int round = 0; round < 4; ++round) {
    std::vector<float> together0, together1;
    std::thread t([&] { together0 = amx(a0, b0, m, k, n, 1.0f); });
    together1 = amx(a1, b1, m, k, n, 1.0f);
    t.join();
    BOOST_TEST(together0 == alone0);
    BOOST_TEST(together1 == alone1);
  }
}

BOOST_AUTO_TEST_CASE(only_the_output_is_written) {
  // c's rows are n floats apart: the padding stays in the kernel's scratch.
  int64_t m = 33, k = 40, n = 17;
  auto a = random_matrix(m, k, 31);
  auto b = random_matrix(k, n, 32);
  std::vector<float> c(static_cast<size_t>(m * n + 16), -7.0f);
  cpu::matmul_bf16(a.data(), b.data(), m, k, n, 1.0f, c.data());
  for (size_t i = static_cast<size_t>(m * n); i < c.size(); ++i)
    BOOST_TEST(c[i] == -7.0f);
}
