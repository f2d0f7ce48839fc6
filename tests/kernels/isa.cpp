#define BOOST_TEST_MODULE kernels_isa
#include <boost/test/unit_test.hpp>

// The instruction-set levels of the CPU kernels (kernels/cpu/isa.hpp): the
// names, the refusals, and every level the CPU has against the baseline on
// the conv kernels, the GEMMs and the K-FAC factor kernels. The other
// kernel suites also run once per level (tests/kernels/CMakeLists.txt).
//
// Tolerance: |level - baseline| <= 1e-4 + 1e-4 |baseline| per element, with
// inputs in [-1, 1] and at most ~800-term sums. The levels sum in other
// orders (16-float vectors, other register blocks, Eigen's AVX-512 GEMM
// panels): FP32 reassociation of K terms of size ~1 moves a sum by ~sqrt(K)
// * 6e-8 * |terms| (~2e-6 here), so 1e-4 leaves margin on a busy machine's
// any thread count while a wrong lane, tail or block is off by O(1).

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/isa.hpp"
#include "kernels/cpu/kfac_factors.hpp"
#include "tests/kernels/kernel_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

constexpr double level_atol = 1e-4;
constexpr double level_rtol = 1e-4;

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

// Selects the start-up choice again when a case ends.
struct restore_auto {
  ~restore_auto() {
    (void) cpu::select_isa("auto");
  }
};

// Everything the compared kernels produce for one input set, at the level
// now selected.
struct results {
  std::vector<std::pair<std::string, tensor>> outputs;

  void add(std::string what, tensor t) {
    outputs.emplace_back(std::move(what), std::move(t));
  }
};

struct conv_shapes {
  tensor_shape x, w;
  int64_t stride;
  padding pad;
};

// Shapes: the ConvNet's two layers, and out_c / in_c off the vector widths
// (8, 16, 32) so that every tail path of both levels runs.
const std::vector<conv_shapes>& conv_cases() {
  static const std::vector<conv_shapes> cases{
    {{4, 28, 28, 1}, {5, 5, 1, 32}, 1, padding::same},
    {{4, 14, 14, 32}, {5, 5, 32, 64}, 1, padding::same},
    {{3, 9, 11, 3}, {3, 3, 3, 13}, 1, padding::valid},
    {{2, 10, 10, 17}, {3, 3, 17, 8}, 1, padding::same},
    {{2, 12, 12, 24}, {3, 2, 24, 40}, 2, padding::same},
    {{2, 8, 8, 9}, {1, 1, 9, 20}, 1, padding::valid},
    // 1x1 kernel rows of one and of two vectors (the second partial) at
    // AVX-512: the transposed weight gradient's 12- and 8-output blocks,
    // split into parts of 9 and 6-7 outputs.
    {{2, 8, 8, 16}, {1, 1, 16, 27}, 2, padding::same},
    {{2, 7, 7, 20}, {1, 1, 20, 20}, 1, padding::valid},
    // One input channel at stride 1 with 3- and 7-tap kernel rows (the
    // sliding forward tile): ResNet-20's stem, and a partial output vector
    {{2, 32, 32, 1}, {3, 3, 1, 16}, 1, padding::same},
    {{2, 13, 19, 1}, {7, 7, 1, 20}, 1, padding::same},
  };
  return cases;
}

results run_all(int threads) {
  results r;
  std::mt19937 rng(1234);
  auto be = make_cpu_backend(threads);
  int idx = 0;
  for (const auto& cc : conv_cases()) {
    auto name = "conv" + std::to_string(idx++);
    auto g = conv2d_geometry::make(cc.x, cc.w, cc.stride, cc.stride, cc.pad);
    BOOST_REQUIRE(g);
    auto x = random_tensor(cc.x, rng);
    auto w = random_tensor(cc.w, rng, -0.3f, 0.3f);
    auto b = random_tensor({cc.w[3]}, rng);
    tensor y;
    SYNCFAC_REQUIRE_OK(be->conv2d_forward(*g, x, w, b, activation::relu, y));
    auto dy = random_tensor(y.shape(), rng);
    tensor ds, dw, db, dx;
    SYNCFAC_REQUIRE_OK(be->conv2d_backward(*g, x, w, y, dy, activation::relu,
                                           ds, dw, db, &dx));
    tensor A, G;
    SYNCFAC_REQUIRE_OK(
      cpu::conv_factors(*g, x, ds, true, {}, threads, A, G));
    tensor As, Gs;
    syncfac::factor_sampling few{2, 3, 7};
    SYNCFAC_REQUIRE_OK(
      cpu::conv_factors(*g, x, ds, true, few, threads, As, Gs));
    r.add(name + " y", y);
    r.add(name + " dw", dw);
    r.add(name + " db", db);
    r.add(name + " dx", dx);
    r.add(name + " A", A);
    r.add(name + " G", G);
    r.add(name + " sampled A", As);
    r.add(name + " sampled G", Gs);
  }
  // GEMMs: every transpose combination, sizes off the vector widths, and
  // the ConvNet's dense layer (3136 -> 1024 at batch 128, cut to 64 rows).
  struct gemm_case {
    int64_t m, n, k;
  };
  for (auto gc : {gemm_case{64, 1024, 3136}, gemm_case{37, 29, 53},
                  gemm_case{128, 10, 1024}, gemm_case{5, 300, 17}}) {
    for (int t = 0; t < 4; ++t) {
      bool ta = (t & 1) != 0;
      bool tb = (t & 2) != 0;
      auto a = random_tensor(ta ? tensor_shape{gc.k, gc.m}
                                : tensor_shape{gc.m, gc.k},
                             rng);
      auto b = random_tensor(tb ? tensor_shape{gc.n, gc.k}
                                : tensor_shape{gc.k, gc.n},
                             rng);
      auto c = random_tensor({gc.m, gc.n}, rng);
      SYNCFAC_REQUIRE_OK(be->gemm(a, ta, b, tb, 0.5f, 0.25f, c));
      r.add("gemm " + std::to_string(gc.m) + "x" + std::to_string(gc.n) + "x"
              + std::to_string(gc.k) + " t" + std::to_string(t),
            c);
    }
  }
  // Dense factors: the blocked SYRK/GEMM path (many rows) and the few-rows
  // kernel (sub-sampled), and a moving average folded from rows.
  for (int64_t in : {int64_t{785}, int64_t{100}, int64_t{9}}) {
    auto a = random_tensor({200, in}, rng);
    auto ds = random_tensor({200, 33}, rng, -0.01f, 0.01f);
    tensor A, G, As, Gs;
    SYNCFAC_REQUIRE_OK(cpu::dense_factors(a, ds, true, {}, threads, A, G));
    SYNCFAC_REQUIRE_OK(
      cpu::dense_factors(a, ds, false, {16, 0, 0}, threads, As, Gs));
    auto name = "dense factors in=" + std::to_string(in);
    r.add(name + " A", A);
    r.add(name + " G", G);
    r.add(name + " sampled A", As);
    r.add(name + " sampled G", Gs);
    tensor raw;
    std::vector<syncfac::gram_rows> rows{{random_tensor({7, in}, rng), 0.5},
                                     {random_tensor({3, in}, rng), 2.0}};
    SYNCFAC_REQUIRE_OK(cpu::fold_rows(raw, 0.9, rows, {0.3, 0.7}));
    r.add(name + " folded", raw);
  }
  return r;
}

} // namespace

BOOST_AUTO_TEST_CASE(the_levels_are_named_and_auto_picks_the_best) {
  restore_auto restore;
  auto built = cpu::built_isas();
  auto supported = cpu::supported_isas();
  BOOST_REQUIRE(!built.empty());
  BOOST_TEST((built.front() == "avx2" || built.front() == "generic"));
#ifdef SYNCFAC_HAVE_AVX512_KERNELS
  BOOST_TEST(contains(built, "avx512"));
#endif
  BOOST_REQUIRE(!supported.empty());
  BOOST_TEST(supported.front() == built.front());
  for (const auto& s : supported)
    BOOST_TEST(contains(built, s));
  SYNCFAC_REQUIRE_OK(cpu::select_isa("auto"));
  BOOST_TEST(cpu::isa_name() == supported.back());
  for (const auto& s : supported) {
    SYNCFAC_REQUIRE_OK(cpu::select_isa(s));
    BOOST_TEST(cpu::isa_name() == s);
    BOOST_TEST(cpu::isa_table().name == s);
    BOOST_TEST(cpu::isa_table().vector_floats == (s == "avx512" ? 16 : 8));
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_level_is_refused_by_name) {
  restore_auto restore;
  SYNCFAC_REQUIRE_OK(cpu::select_isa(cpu::built_isas().front()));
  check_error(cpu::select_isa("avx1024"), ec::unknown_name,
              {"--isa", "'avx1024'", "auto", cpu::built_isas().front()});
  check_error(cpu::select_isa(""), ec::unknown_name, {"--isa", "''"});
  BOOST_TEST(cpu::isa_name() == cpu::built_isas().front());
}

BOOST_AUTO_TEST_CASE(a_level_the_cpu_lacks_is_refused_by_name) {
  restore_auto restore;
  auto supported = cpu::supported_isas();
  int lacking = 0;
  for (const auto& b : cpu::built_isas()) {
    if (contains(supported, b))
      continue;
    ++lacking;
    auto before = std::string{cpu::isa_name()};
    check_error(cpu::select_isa(b), ec::unavailable,
                {"--isa", "'" + b + "'", "lacks", supported.back()});
    BOOST_TEST(cpu::isa_name() == before);
  }
  BOOST_TEST_MESSAGE("built levels this CPU lacks: " << lacking);
}

BOOST_AUTO_TEST_CASE(every_level_matches_the_baseline) {
  restore_auto restore;
  auto levels = cpu::supported_isas();
  BOOST_TEST_MESSAGE("levels this CPU runs: " << levels.size());
  for (int threads : {1, 2}) {
    SYNCFAC_REQUIRE_OK(cpu::select_isa(levels.front()));
    auto base = run_all(threads);
    for (size_t l = 1; l < levels.size(); ++l) {
      SYNCFAC_REQUIRE_OK(cpu::select_isa(levels[l]));
      auto other = run_all(threads);
      BOOST_REQUIRE_EQUAL(other.outputs.size(), base.outputs.size());
      for (size_t i = 0; i < base.outputs.size(); ++i)
        check_close(other.outputs[i].second, base.outputs[i].second, level_atol,
                    level_rtol,
                    levels[l] + " vs " + levels.front() + ", "
                      + std::to_string(threads) + " thread(s): "
                      + base.outputs[i].first);
    }
  }
}
