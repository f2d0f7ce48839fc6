// A device actor on gpu:0: its K-FAC inversions (invert_atom) run through
// the CUDA inverter it made for its backend and answer what the CPU
// answers. Built only with CUDA; exits 77 (skipped) without a CUDA device.

#define BOOST_TEST_MODULE actors_device_gpu
#include "tests/kernels/cuda_test_utils.hpp"

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/device_actor.hpp"
#include "runtime/program_config.hpp"
#include "tests/helpers.hpp"
#include "tests/kernels/cuda_inverse_sets.hpp"

using namespace syncfac;
using namespace syncfac::test;

BOOST_AUTO_TEST_CASE(inverts_factors_on_the_gpu_like_the_cpu) {
  program_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto gpu = spawn_device(sys, device_config{"gpu:0", 1});
  BOOST_REQUIRE_MESSAGE(gpu, why(gpu));
  auto info = ask<device_info>(self, *gpu, info_atom::value);
  BOOST_REQUIRE_MESSAGE(info, why(info));
  BOOST_CHECK_EQUAL(info->backend, "cuda:0");
  std::mt19937 rng{7};
  auto set = hard_factor_set(rng);
  for (auto mode : {inverse_mode::cholesky, inverse_mode::eigen}) {
    BOOST_TEST_CONTEXT("mode " << (mode == inverse_mode::eigen ? "eigen"
                                                               : "cholesky")) {
      auto kcfg = hard_factor_config(mode);
      auto on_gpu = ask<inverse_set>(self, *gpu, invert_atom::value, set,
                                     kcfg);
      BOOST_REQUIRE_MESSAGE(on_gpu, why(on_gpu));
      // The tolerances of tests/kernels/cuda_kfac.cpp.
      check_inverse_sets_close(*on_gpu, invert_factors(set, kcfg),
                               mode == inverse_mode::eigen ? 1e-4 : 1e-5,
                               rng);
    }
  }
  self->send_exit(*gpu, caf::exit_reason::user_shutdown);
}
