// bfloat16 products (kernels/cpu/bf16_gemm.hpp) on every backend that runs
// here, AMX and AVX512-BF16, against a reference that rounds the same
// inputs to bfloat16 (nearest even) and sums in double, and against the
// unrounded product. Skips (tests/hardware_skip.hpp) where the CPU or OS
// runs neither, after checking that the refusal names what is missing.
//
// Tolerance against the rounded reference: |c - reference| <= 1e-5 ·
// Σₖ|aᵢₖ bₖⱼ| per element. The kernels sum the products in float in another
// order (pairs, then 32 at a time on AMX, 128 pairs a pass on AVX512-BF16):
// ~√k · 6e-8 of the magnitudes (2e-6 at k = 1024). Inputs rounded the wrong
// way (truncated) or not at all are off by ~1e-3 of them, a dropped k by
// 1/k of them (1e-3 at k = 1001), a wrong pair, lane, tile or padding by
// O(1).
//
// Against the unrounded product: bfloat16 keeps 8 significant bits, so a
// rounded input is within u = 2⁻⁸ of itself (relative), each product within
// 2u + u² = 7.83e-3 of itself, and the sum within that of Σ|ab| plus the
// float sums' 1e-5: 8e-3 of Σₖ|aᵢₖ bₖⱼ| bounds what bfloat16 may cost (a
// single product, k = 1, comes near it: 6e-3 measured).

#define BOOST_TEST_MODULE kernels_bf16_gemm
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/bf16_gemm.hpp"
#include "runtime/base/error.hpp"
#include "tests/hardware_skip.hpp"

int main(int argc, char* argv[]) {
  auto backend = syncfac::cpu::bf16_products_backend();
  if (!backend) {
    auto text = syncfac::render(backend.error());
    // The refusal must say what it is about, and capped below avx512 (the
    // suite's _max_avx2 entry) that the level is what is missing.
    const char* cap = std::getenv("SYNCFAC_MAX_ISA");
    bool capped_low = cap != nullptr && std::string{cap} != "avx512";
    for (const char* needed :
         {"bfloat16 products", "AMX", "AVX512-BF16",
          capped_low ? "need the avx512 level" : "bfloat16"}) {
      if (text.find(needed) == std::string::npos) {
        std::printf("the refusal does not name '%s': %s\n", needed,
                    text.c_str());
        return 1;
      }
    }
    syncfac::test::skip_for_missing(syncfac::test::missing_hardware::cpu_level,
                                    text);
  }
  std::printf("bfloat16 products on %s\n",
              syncfac::cpu::to_string(*backend));
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

// The backends that run here (at least one: main skipped otherwise).
std::vector<cpu::bf16_backend> running() {
  std::vector<cpu::bf16_backend> found;
  for (auto b : {cpu::bf16_backend::amx, cpu::bf16_backend::avx512_bf16})
    if (!cpu::bf16_backend_runs(b))
      found.push_back(b);
  return found;
}

std::vector<float> bf16(cpu::bf16_backend on, const std::vector<float>& a,
                        const std::vector<float>& b, int64_t m, int64_t k,
                        int64_t n, float alpha) {
  std::vector<float> c(static_cast<size_t>(m * n), -7.0f);
  cpu::matmul_bf16(on, a.data(), b.data(), m, k, n, alpha, c.data());
  return c;
}

float unrounded(float x) {
  return x;
}

constexpr double tolerance = 1e-5;
constexpr double bf16_bound = 8e-3; // against the unrounded product

struct shape {
  int64_t m, k, n;
};

} // namespace

BOOST_AUTO_TEST_CASE(the_best_backend_is_one_that_runs) {
  auto best = cpu::bf16_products_backend();
  BOOST_REQUIRE(static_cast<bool>(best));
  BOOST_TEST(!cpu::bf16_backend_runs(*best));
  BOOST_TEST(cpu::to_string(running().front()) == cpu::to_string(*best));
}

BOOST_AUTO_TEST_CASE(a_backend_that_does_not_run_is_refused_by_name) {
  for (auto b : {cpu::bf16_backend::amx, cpu::bf16_backend::avx512_bf16}) {
    auto err = cpu::bf16_backend_runs(b);
    if (!err)
      continue;
    auto text = render(err);
    BOOST_TEST_INFO(text);
    BOOST_TEST((err == ec::unavailable));
    auto about = std::string{"bfloat16 products on "} + cpu::to_string(b)
                 + ": ";
    BOOST_TEST(text.find(about) != std::string::npos);
    BOOST_TEST(text.size() > text.find(about) + about.size()); // and why
  }
}

BOOST_AUTO_TEST_CASE(products_of_every_shape_match_the_rounded_reference) {
  // Sizes around AMX's 16 and 32, the AVX512-BF16 block's 12 rows and 32
  // columns, odd k (a pair half padding), k beyond one or more passes of
  // 128 pairs (later passes add to c), and the autoencoder's layers ([785, 1001]
  // against its inverses); alpha != 1, negative too.
  const shape shapes[] = {{1, 1, 1},      {16, 32, 16},   {17, 33, 15},
                          {31, 1, 64},    {32, 64, 32},   {45, 100, 7},
                          {12, 2, 32},    {13, 3, 33},    {25, 513, 47},
                          {11, 515, 65},  {100, 251, 31}, {251, 500, 251},
                          {24, 256, 64},  {24, 257, 64}, {785, 1001, 30}};
  const float alphas[] = {0.5f, -1.75f};
  for (auto on : running()) {
    uint32_t seed = 1;
    for (auto s : shapes) {
      auto a = random_matrix(s.m, s.k, seed++);
      auto b = random_matrix(s.k, s.n, seed++);
      auto alpha = alphas[seed % 2];
      auto c = bf16(on, a, b, s.m, s.k, s.n, alpha);
      BOOST_TEST_INFO(cpu::to_string(on) << ", shape " << s.m << " x " << s.k
                                         << " x " << s.n << ", alpha "
                                         << alpha);
      BOOST_TEST(worst(c, product(a, b, s.m, s.k, s.n, alpha, bf16_round))
                 <= tolerance);
      BOOST_TEST(worst(c, product(a, b, s.m, s.k, s.n, alpha, unrounded))
                 <= bf16_bound);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_inputs_are_rounded_to_nearest_even) {
  // The reference of truncated or unrounded inputs is far off: the check
  // above could tell a wrong rounding.
  int64_t m = 64, k = 512, n = 48;
  auto a = random_matrix(m, k, 11);
  auto b = random_matrix(k, n, 12);
  for (auto on : running()) {
    BOOST_TEST_CONTEXT(cpu::to_string(on)) {
      auto c = bf16(on, a, b, m, k, n, 1.0f);
      BOOST_TEST(worst(c, product(a, b, m, k, n, 1.0f, bf16_round))
                 <= tolerance);
      BOOST_TEST(worst(c, product(a, b, m, k, n, 1.0f, bf16_truncate))
                 > 10 * tolerance);
      BOOST_TEST(worst(c, product(a, b, m, k, n, 1.0f, unrounded))
                 > 10 * tolerance);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_backends_round_alike) {
  // Both round with the same instruction: they differ by the order of the
  // float sums only, far below what a rounding apart would give.
  auto on = running();
  if (on.size() < 2)
    return; // one backend here: nothing to compare (AMX CPUs run both)
  int64_t m = 77, k = 301, n = 45;
  auto a = random_matrix(m, k, 41);
  auto b = random_matrix(k, n, 42);
  auto ref = product(a, b, m, k, n, 1.0f, bf16_round);
  auto c0 = bf16(on[0], a, b, m, k, n, 1.0f);
  auto c1 = bf16(on[1], a, b, m, k, n, 1.0f);
  for (size_t i = 0; i < c0.size(); ++i)
    BOOST_REQUIRE(std::abs(c0[i] - c1[i]) <= 2 * tolerance * ref.magnitude[i]);
}

BOOST_AUTO_TEST_CASE(threads_compute_with_their_own_scratch) {
  // Each thread has its own tiles and packed panels: products on two
  // threads at once give the bits of the same products on one.
  int64_t m = 200, k = 300, n = 70;
  auto a0 = random_matrix(m, k, 21), b0 = random_matrix(k, n, 22);
  auto a1 = random_matrix(m, k, 23), b1 = random_matrix(k, n, 24);
  for (auto on : running()) {
    auto alone0 = bf16(on, a0, b0, m, k, n, 1.0f);
    auto alone1 = bf16(on, a1, b1, m, k, n, 1.0f);
    for (int round = 0; round < 4; ++round) {
      std::vector<float> together0, together1;
      std::thread t([&] { together0 = bf16(on, a0, b0, m, k, n, 1.0f); });
      together1 = bf16(on, a1, b1, m, k, n, 1.0f);
      t.join();
      BOOST_TEST(together0 == alone0);
      BOOST_TEST(together1 == alone1);
    }
  }
}

BOOST_AUTO_TEST_CASE(only_the_output_is_written) {
  // c's rows are n floats apart: the padding stays in the kernel's scratch.
  int64_t m = 33, k = 40, n = 17;
  auto a = random_matrix(m, k, 31);
  auto b = random_matrix(k, n, 32);
  for (auto on : running()) {
    std::vector<float> c(static_cast<size_t>(m * n + 16), -7.0f);
    cpu::matmul_bf16(on, a.data(), b.data(), m, k, n, 1.0f, c.data());
    for (size_t i = static_cast<size_t>(m * n); i < c.size(); ++i)
      BOOST_TEST(c[i] == -7.0f);
  }
}
