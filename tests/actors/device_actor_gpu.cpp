// A device actor on gpu:0: its K-FAC kernels (the statistics of stats
// requests, the inversions of invert_atom, and the local K-FAC step's
// statistics, inverses and preconditioning) run through the CUDA kernels it
// made for its backend and answer what a CPU device answers. Built only
// with CUDA; skipped (tests/hardware_skip.hpp) without a CUDA device.

#define BOOST_TEST_MODULE actors_device_gpu
#include "tests/kernels/cuda_test_utils.hpp"

#include <tuple>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/device_actor.hpp"
#include "runtime/data/batcher.hpp"
#include "actors/program_config.hpp"
#include "tests/actor_fixture.hpp"
#include "tests/helpers.hpp"
#include "tests/kernels/cuda_inverse_sets.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

/// An actor system with a device actor on gpu:0, ended with the test.
struct gpu_device : actor_fixture {
  device_actor gpu = keep(spawn_device(sys, device_config{"gpu:0", 1}));
};

} // namespace

BOOST_FIXTURE_TEST_CASE(inverts_factors_on_the_gpu_like_the_cpu, gpu_device) {
  auto info = ask<device_info>(gpu, info_atom::value);
  BOOST_REQUIRE_MESSAGE(info, why(info));
  BOOST_CHECK_EQUAL(info->backend, "cuda:0");
  std::mt19937 rng{7};
  auto set = hard_factor_set(rng);
  for (auto mode : {inverse_mode::cholesky, inverse_mode::eigen}) {
    BOOST_TEST_CONTEXT("mode " << (mode == inverse_mode::eigen ? "eigen"
                                                               : "cholesky")) {
      auto kcfg = hard_factor_config(mode);
      auto on_gpu = ask<inverse_set>(gpu, invert_atom::value, set,
                                     kcfg);
      BOOST_REQUIRE_MESSAGE(on_gpu, why(on_gpu));
      // The tolerances of tests/kernels/cuda_kfac.cpp.
      check_inverse_sets_close(*on_gpu, invert_factors(set, kcfg),
                               mode == inverse_mode::eigen ? 1e-4 : 1e-5,
                               rng);
    }
  }
}

namespace {

/// Statistics of the same layers from two devices, within the tolerance
/// of a forward and backward pass on each (their round-off differs).
void check_stats_close(const std::vector<layer_stats>& got,
                       const std::vector<layer_stats>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& x = got[i];
    const auto& y = want[i];
    BOOST_TEST_CONTEXT("layer '" << y.layer << "'") {
      BOOST_CHECK_EQUAL(x.layer, y.layer);
      for (auto [a, b, what] :
           {std::tuple{&x.a, &y.a, "A"}, std::tuple{&x.g, &y.g, "G"},
            std::tuple{&x.a_rows.x, &y.a_rows.x, "A rows"},
            std::tuple{&x.g_rows.x, &y.g_rows.x, "G rows"}})
        check_close(*a, *b, 1e-4 * max_abs(*b), 1e-3, what);
      BOOST_CHECK_EQUAL(x.a_rows.scale, y.a_rows.scale);
      BOOST_CHECK_EQUAL(x.g_rows.scale, y.g_rows.scale);
    }
  }
}

} // namespace

BOOST_FIXTURE_TEST_CASE(kfac_statistics_and_steps_on_the_gpu_match_the_cpu,
                        gpu_device) {
  auto cpu = keep(spawn_device(sys, device_config{"cpu", 2}));
  // The ConvNet: conv and dense layers.
  auto info = ask<model_info>(gpu, load_model_atom::value,
                              model_spec{}, uint64_t{7});
  BOOST_REQUIRE_MESSAGE(info, why(info));
  BOOST_REQUIRE(ask<model_info>(cpu, load_model_atom::value,
                                model_spec{}, uint64_t{7}));
  auto data = make_fake_dataset(32, 3);
  batch b;
  slice(data, 0, 32, b);
  // The empirical Fisher: no targets drawn from the model, whose
  // probabilities differ in the last bits between the devices.
  stats_request req;
  req.fisher = fisher_type::empirical;
  // All 32 examples as matrices; 8 with rows (the dense factors come as
  // rows, the conv factors as matrices).
  for (int64_t examples : {0, 8}) {
    BOOST_TEST_CONTEXT("examples " << examples) {
      req.sampling.max_examples = examples;
      req.rows = examples > 0;
      auto on_gpu = ask<stats_update>(gpu, stats_atom::value,
                                      info->initial, b, req);
      BOOST_REQUIRE_MESSAGE(on_gpu, why(on_gpu));
      auto on_cpu = ask<stats_update>(cpu, stats_atom::value,
                                      info->initial, b, req);
      BOOST_REQUIRE_MESSAGE(on_cpu, why(on_cpu));
      check_stats_close(on_gpu->layers, on_cpu->layers);
    }
  }
  // Local K-FAC steps, inverting every step: statistics, inverses and
  // preconditioning on each device's kernels.
  optimizer_config opt;
  opt.kind = optimizer_kind::kfac;
  opt.learning_rate = 0.01f;
  opt.kfac.fisher = fisher_type::empirical;
  opt.kfac.invert_every = 1;
  for (auto& dev : {gpu, cpu})
    BOOST_REQUIRE(ask<caf::ok_atom>(dev, optimizer_atom::value, opt));
  for (int step = 0; step < 3; ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      auto on_gpu = ask<step_result>(gpu, train_atom::value, b);
      BOOST_REQUIRE_MESSAGE(on_gpu, why(on_gpu));
      auto on_cpu = ask<step_result>(cpu, train_atom::value, b);
      BOOST_REQUIRE_MESSAGE(on_cpu, why(on_cpu));
      BOOST_CHECK_CLOSE(on_gpu->loss, on_cpu->loss, 0.1); // percent
    }
  }
  auto p_gpu = ask<parameter_set>(gpu, params_atom::value);
  auto p_cpu = ask<parameter_set>(cpu, params_atom::value);
  BOOST_REQUIRE(p_gpu && p_cpu);
  BOOST_REQUIRE_EQUAL(p_gpu->size(), p_cpu->size());
  for (size_t i = 0; i < p_gpu->size(); ++i)
    check_close((*p_gpu)[i].value, (*p_cpu)[i].value,
                1e-3 * max_abs((*p_cpu)[i].value), 1e-2, (*p_cpu)[i].name);
}
