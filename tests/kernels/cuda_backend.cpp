// Every kernel of the CUDA backend against the CPU backend on the same
// inputs, gradients against finite differences, and the error paths. Exits
// 77 (skipped) without a CUDA device.

#define BOOST_TEST_MODULE kernels_cuda_backend
#include "tests/kernels/cuda_test_utils.hpp"

#include <thread>

#include "runtime/model.hpp"

using namespace syncfac;
using namespace syncfac::test;

namespace {

// Per-kernel tolerances (absolute, relative): products accumulate in a
// different order (cuBLAS vs Eigen/AVX2), elementwise kernels differ only
// in the libm (tanh: Eigen's rational approximation vs CUDA's tanhf).
constexpr double gemm_atol = 1e-4, gemm_rtol = 1e-4;
constexpr double elem_atol = 2e-6, elem_rtol = 2e-6;

conv2d_geometry conv_geom(tensor_shape x, tensor_shape w, int64_t sh,
                          int64_t sw, padding pad) {
  auto g = conv2d_geometry::make(x, w, sh, sw, pad);
  BOOST_REQUIRE_MESSAGE(g, (g ? std::string{} : render(g.error())));
  return *g;
}

pool2d_geometry pool_geom(tensor_shape x, int64_t k, int64_t s, padding pad) {
  auto g = pool2d_geometry::make(x, k, k, s, s, pad);
  BOOST_REQUIRE_MESSAGE(g, (g ? std::string{} : render(g.error())));
  return *g;
}

#ifdef SYNCFAC_CUDA_TESTS_ON_CPU
constexpr bool on_gpu = false;
#else
constexpr bool on_gpu = true;
#endif

/// A second backend of the kind under test, for lifetime checks.
std::unique_ptr<backend> another_backend() {
#ifdef SYNCFAC_CUDA_TESTS_ON_CPU
  return make_cpu_backend(1);
#else
  auto made = cuda::make_cuda_backend(0);
  BOOST_REQUIRE_MESSAGE(made, (made ? std::string{} : render(made.error())));
  return std::move(*made);
#endif
}

label_vector random_labels(int64_t n, int32_t k, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> dist(0, k - 1);
  label_vector result(static_cast<size_t>(n));
  for (auto& l : result)
    l = dist(rng);
  return result;
}

/// `run(dev, out)` (a kernel of `dev` writing `out`) on `gpu` and on `cpu`,
/// the outputs within atol + rtol·|cpu's|; the CPU's output.
template <class Run>
tensor check_matches_cpu(backend& gpu, backend& cpu, Run run, double atol,
                         double rtol, const std::string& what) {
  tensor on_gpu, on_cpu;
  SYNCFAC_REQUIRE_OK(run(gpu, on_gpu));
  SYNCFAC_REQUIRE_OK(run(cpu, on_cpu));
  check_close(on_gpu, on_cpu, atol, rtol, what);
  return on_cpu;
}

/// A loss's forward (probabilities, mean loss) and backward (from the CPU's
/// probabilities) on `gpu` against `cpu`, for `targets`: the labels or
/// target values the loss takes. dlogits agree within `d_atol` (and 1e-6
/// relative); `name` begins the checks' messages.
template <class Targets>
void check_loss_matches(
  backend& gpu, backend& cpu,
  caf::error (backend::*forward)(const tensor&, const Targets&, tensor&,
                                 float&),
  caf::error (backend::*backward)(const tensor&, const Targets&, tensor&),
  const tensor& logits, const Targets& targets, double d_atol,
  const std::string& name) {
  tensor p_gpu, p_cpu;
  float l_gpu = 0, l_cpu = 0;
  SYNCFAC_REQUIRE_OK((gpu.*forward)(logits, targets, p_gpu, l_gpu));
  SYNCFAC_REQUIRE_OK((cpu.*forward)(logits, targets, p_cpu, l_cpu));
  check_close(p_gpu, p_cpu, 1e-7, 1e-5, name + " probs");
  BOOST_CHECK_CLOSE(l_gpu, l_cpu, 1e-4);
  tensor d_gpu, d_cpu;
  SYNCFAC_REQUIRE_OK((gpu.*backward)(p_cpu, targets, d_gpu));
  SYNCFAC_REQUIRE_OK((cpu.*backward)(p_cpu, targets, d_cpu));
  check_close(d_gpu, d_cpu, d_atol, 1e-6, name + " dlogits");
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(cuda_backend_ops, cuda_fixture)

#ifndef SYNCFAC_CUDA_TESTS_ON_CPU
BOOST_AUTO_TEST_CASE(name_and_threads) {
  BOOST_CHECK_EQUAL(gpu->name(), "cuda:0");
  BOOST_CHECK_EQUAL(gpu->threads(), 1);
  auto missing = cuda::make_cuda_backend(cuda::device_count());
  BOOST_REQUIRE(!missing);
  check_error(missing.error(), ec::unavailable,
              {"gpu:" + std::to_string(cuda::device_count()),
               "not available"});
}
#endif

BOOST_AUTO_TEST_CASE(gemm_matches_cpu) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 0.5f}) {
        int64_t m = 37, k = 53, n = 29;
        auto a = random_tensor(ta ? tensor_shape{k, m} : tensor_shape{m, k},
                               rng);
        auto b = random_tensor(tb ? tensor_shape{n, k} : tensor_shape{k, n},
                               rng);
        auto c0 = random_tensor({m, n}, rng);
        tensor c_gpu = c0;
        tensor c_cpu = c0;
        SYNCFAC_REQUIRE_OK(gpu->gemm(a, ta, b, tb, 0.7f, beta, c_gpu));
        SYNCFAC_REQUIRE_OK(cpu->gemm(a, ta, b, tb, 0.7f, beta, c_cpu));
        check_close(c_gpu, c_cpu, gemm_atol, gemm_rtol,
                    "gemm ta=" + std::to_string(ta) + " tb="
                      + std::to_string(tb) + " beta="
                      + std::to_string(beta));
      }
  // A large square product (several cuBLAS tiles).
  auto a = random_tensor({512, 768}, rng);
  auto b = random_tensor({768, 384}, rng);
  check_matches_cpu(
    *gpu, *cpu,
    [&](backend& dev, tensor& c) {
      return dev.gemm(a, false, b, false, 1.0f, 0.0f, c);
    },
    1e-3, 1e-4, "gemm 512x768x384");
  // c aliasing an input, as the CPU allows.
  auto sq = random_tensor({16, 16}, rng);
  tensor s_gpu = sq;
  tensor s_cpu = sq;
  SYNCFAC_REQUIRE_OK(gpu->gemm(s_gpu, false, s_gpu, true, 1.0f, 1.0f, s_gpu));
  SYNCFAC_REQUIRE_OK(cpu->gemm(s_cpu, false, s_cpu, true, 1.0f, 1.0f, s_cpu));
  check_close(s_gpu, s_cpu, gemm_atol, gemm_rtol, "gemm aliased");
}

BOOST_AUTO_TEST_CASE(gemm_errors_match_cpu) {
  auto a = random_tensor({3, 4}, rng);
  auto b = random_tensor({5, 6}, rng);
  tensor c;
  auto e_gpu = gpu->gemm(a, false, b, false, 1.0f, 0.0f, c);
  auto e_cpu = cpu->gemm(a, false, b, false, 1.0f, 0.0f, c);
  check_error(e_gpu, ec::shape_mismatch, {"[3, 4]", "[5, 6]"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
  BOOST_CHECK(c.empty());
}

BOOST_AUTO_TEST_CASE(gemm_batched_matches_cpu) {
  // b batched or one matrix shared by every entry (the shared one, with a
  // untransposed, runs on the GPU as one product of the stacked entries).
  for (bool shared_b : {false, true})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.5f}) {
          int64_t batch = 5, m = 37, k = 53, n = 29;
          auto a = random_tensor(ta ? tensor_shape{batch, k, m}
                                    : tensor_shape{batch, m, k},
                                 rng);
          auto b_entry = tb ? tensor_shape{n, k} : tensor_shape{k, n};
          auto b_shape = b_entry;
          if (!shared_b)
            b_shape.insert(b_shape.begin(), batch);
          auto b = random_tensor(b_shape, rng);
          auto c0 = random_tensor({batch, m, n}, rng);
          tensor c_gpu = c0;
          tensor c_cpu = c0;
          SYNCFAC_REQUIRE_OK(
            gpu->gemm_batched(a, ta, b, tb, 0.7f, beta, c_gpu));
          SYNCFAC_REQUIRE_OK(
            cpu->gemm_batched(a, ta, b, tb, 0.7f, beta, c_cpu));
          check_close(c_gpu, c_cpu, gemm_atol, gemm_rtol,
                      "gemm_batched shared_b=" + std::to_string(shared_b)
                        + " ta=" + std::to_string(ta) + " tb="
                        + std::to_string(tb) + " beta="
                        + std::to_string(beta));
        }
  // Batch 1, and the benchmark's shape (64 entries of 256 x 256).
  for (int64_t batch : {int64_t{1}, int64_t{64}}) {
    auto a = random_tensor({batch, 256, 256}, rng);
    auto b = random_tensor({batch, 256, 256}, rng);
    check_matches_cpu(
      *gpu, *cpu,
      [&](backend& dev, tensor& c) {
        return dev.gemm_batched(a, false, b, true, 1.0f, 0.0f, c);
      },
      1e-3, 1e-4, "gemm_batched " + std::to_string(batch) + " x 256^3");
  }
}

BOOST_AUTO_TEST_CASE(gemm_batched_errors_match_cpu) {
  auto a = random_tensor({2, 3, 4}, rng);
  tensor c;
  for (const auto& b : {random_tensor({3, 4, 6}, rng),
                        random_tensor({2, 5, 6}, rng),
                        random_tensor({5, 6}, rng)}) {
    auto e_gpu = gpu->gemm_batched(a, false, b, false, 1.0f, 0.0f, c);
    auto e_cpu = cpu->gemm_batched(a, false, b, false, 1.0f, 0.0f, c);
    check_error(e_gpu, ec::shape_mismatch, {"[2, 3, 4]", b.shape_string()});
    BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
  }
  BOOST_CHECK(c.empty());
}

BOOST_AUTO_TEST_CASE(dense_matches_cpu) {
  for (auto act : all_activations()) {
    BOOST_TEST_CONTEXT("activation " << to_string(act)) {
      int64_t n = 33, in = 47, out = 19;
      auto x = random_tensor({n, in}, rng);
      auto w = random_tensor({in, out}, rng, -0.3f, 0.3f);
      auto b = random_tensor({out}, rng);
      auto y_cpu = check_matches_cpu(
        *gpu, *cpu,
        [&](backend& dev, tensor& y) {
          return dev.dense_forward(x, w, b, act, y);
        },
        gemm_atol, gemm_rtol, "dense y");
      auto dy = random_tensor({n, out}, rng);
      tensor ds_g, dw_g, db_g, dx_g, ds_c, dw_c, db_c, dx_c;
      SYNCFAC_REQUIRE_OK(gpu->dense_backward(x, w, y_cpu, dy, act, ds_g, dw_g,
                                             db_g, &dx_g));
      SYNCFAC_REQUIRE_OK(cpu->dense_backward(x, w, y_cpu, dy, act, ds_c, dw_c,
                                             db_c, &dx_c));
      check_close(ds_g, ds_c, elem_atol, elem_rtol, "dense ds");
      check_close(dw_g, dw_c, gemm_atol, gemm_rtol, "dense dw");
      check_close(db_g, db_c, gemm_atol, gemm_rtol, "dense db");
      check_close(dx_g, dx_c, gemm_atol, gemm_rtol, "dense dx");
      // Without dx.
      SYNCFAC_REQUIRE_OK(gpu->dense_backward(x, w, y_cpu, dy, act, ds_g, dw_g,
                                             db_g, nullptr));
      check_close(dw_g, dw_c, gemm_atol, gemm_rtol, "dense dw (no dx)");
    }
  }
}

BOOST_AUTO_TEST_CASE(dense_errors_match_cpu) {
  auto x = random_tensor({4, 5}, rng);
  auto w = random_tensor({6, 3}, rng);
  auto b = random_tensor({3}, rng);
  tensor y;
  auto e_gpu = gpu->dense_forward(x, w, b, activation::relu, y);
  auto e_cpu = cpu->dense_forward(x, w, b, activation::relu, y);
  check_error(e_gpu, ec::shape_mismatch, {"[4, 5]", "[6, 3]"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
}

BOOST_AUTO_TEST_CASE(conv2d_matches_cpu) {
  struct shape_case {
    tensor_shape x, w;
    int64_t sh, sw;
    padding pad;
  };
  std::vector<shape_case> cases{
    {{3, 9, 8, 3}, {3, 3, 3, 5}, 1, 1, padding::same},
    {{2, 11, 10, 4}, {5, 4, 4, 6}, 2, 2, padding::valid},
    {{2, 28, 28, 1}, {5, 5, 1, 8}, 1, 1, padding::same},
    {{2, 7, 7, 6}, {1, 1, 6, 3}, 1, 1, padding::same},
    {{1, 6, 9, 2}, {3, 2, 2, 4}, 2, 3, padding::same},
  };
  for (const auto& sc : cases)
    for (auto act : {activation::identity, activation::relu,
                     activation::tanh}) {
      BOOST_TEST_CONTEXT("x " << to_string(sc.x) << " w " << to_string(sc.w)
                              << " stride " << sc.sh << "x" << sc.sw << " "
                              << to_string(sc.pad) << " "
                              << to_string(act)) {
        auto g = conv_geom(sc.x, sc.w, sc.sh, sc.sw, sc.pad);
        auto x = random_tensor(sc.x, rng);
        auto w = random_tensor(sc.w, rng, -0.3f, 0.3f);
        auto b = random_tensor({g.out_c}, rng);
        auto y_cpu = check_matches_cpu(
          *gpu, *cpu,
          [&](backend& dev, tensor& y) {
            return dev.conv2d_forward(g, x, w, b, act, y);
          },
          gemm_atol, gemm_rtol, "conv y");
        auto dy = random_tensor(g.output_shape(), rng);
        tensor ds_g, dw_g, db_g, dx_g, ds_c, dw_c, db_c, dx_c;
        SYNCFAC_REQUIRE_OK(gpu->conv2d_backward(g, x, w, y_cpu, dy, act, ds_g,
                                                dw_g, db_g, &dx_g));
        SYNCFAC_REQUIRE_OK(cpu->conv2d_backward(g, x, w, y_cpu, dy, act, ds_c,
                                                dw_c, db_c, &dx_c));
        check_close(ds_g, ds_c, elem_atol, elem_rtol, "conv ds");
        check_close(dw_g, dw_c, 2e-4, 2e-4, "conv dw");
        check_close(db_g, db_c, 2e-4, 2e-4, "conv db");
        check_close(dx_g, dx_c, gemm_atol, gemm_rtol, "conv dx");
        tensor dw_n, db_n, ds_n;
        SYNCFAC_REQUIRE_OK(gpu->conv2d_backward(g, x, w, y_cpu, dy, act, ds_n,
                                                dw_n, db_n, nullptr));
        check_close(dw_n, dw_c, 2e-4, 2e-4, "conv dw (no dx)");
        // Without the parameter gradients (K-FAC's statistics pass).
        tensor ds_d, dx_d;
        SYNCFAC_REQUIRE_OK(gpu->conv2d_backward_data(g, x, w, y_cpu, dy, act,
                                                     ds_d, &dx_d));
        check_close(ds_d, ds_c, elem_atol, elem_rtol, "conv data ds");
        check_close(dx_d, dx_c, gemm_atol, gemm_rtol, "conv data dx");
        SYNCFAC_REQUIRE_OK(gpu->conv2d_backward_data(g, x, w, y_cpu, dy, act,
                                                     ds_d, nullptr));
        check_close(ds_d, ds_c, elem_atol, elem_rtol, "conv data ds only");
      }
    }
}

// A batch whose patches exceed one im2col chunk (64 Mi floats): the weight
// gradient accumulates over chunks.
BOOST_AUTO_TEST_CASE(conv2d_chunked_matches_cpu) {
  auto g = conv_geom({80, 56, 56, 32}, {3, 3, 32, 8}, 1, 1, padding::same);
  BOOST_REQUIRE_GT(g.batch * g.locations() * g.patch_size(), int64_t{64} << 20);
  auto x = random_tensor(g.input_shape(), rng);
  auto w = random_tensor(g.kernel_shape(), rng, -0.1f, 0.1f);
  auto b = random_tensor({g.out_c}, rng);
  auto y_cpu = check_matches_cpu(
    *gpu, *cpu,
    [&](backend& dev, tensor& y) {
      return dev.conv2d_forward(g, x, w, b, activation::relu, y);
    },
    2e-4, 2e-4, "chunked conv y");
  auto dy = random_tensor(g.output_shape(), rng);
  tensor ds_g, dw_g, db_g, dx_g, ds_c, dw_c, db_c, dx_c;
  SYNCFAC_REQUIRE_OK(gpu->conv2d_backward(g, x, w, y_cpu, dy, activation::relu,
                                          ds_g, dw_g, db_g, &dx_g));
  SYNCFAC_REQUIRE_OK(cpu->conv2d_backward(g, x, w, y_cpu, dy, activation::relu,
                                          ds_c, dw_c, db_c, &dx_c));
  // dw sums 250,880 products per entry.
  check_close(dw_g, dw_c, 5e-2, 1e-3, "chunked conv dw");
  check_close(db_g, db_c, 5e-2, 1e-3, "chunked conv db");
  check_close(dx_g, dx_c, 2e-4, 2e-4, "chunked conv dx");
}

BOOST_AUTO_TEST_CASE(conv2d_errors_match_cpu) {
  auto g = conv_geom({2, 8, 8, 3}, {3, 3, 3, 4}, 1, 1, padding::same);
  auto x = random_tensor({2, 8, 8, 2}, rng);
  auto w = random_tensor(g.kernel_shape(), rng);
  auto b = random_tensor({4}, rng);
  tensor y;
  auto e_gpu = gpu->conv2d_forward(g, x, w, b, activation::relu, y);
  auto e_cpu = cpu->conv2d_forward(g, x, w, b, activation::relu, y);
  check_error(e_gpu, ec::shape_mismatch, {"[2, 8, 8, 2]"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
}

BOOST_AUTO_TEST_CASE(activations_match_cpu) {
  auto x = random_tensor({7, 301}, rng, -4.0f, 4.0f);
  for (auto act : all_activations()) {
    BOOST_TEST_CONTEXT("activation " << to_string(act)) {
      auto y_cpu = check_matches_cpu(
        *gpu, *cpu,
        [&](backend& dev, tensor& y) {
          return dev.activation_forward(act, x, y);
        },
        1e-6, 1e-5, "activation y");
      auto dy = random_tensor(x.shape(), rng);
      check_matches_cpu(
        *gpu, *cpu,
        [&](backend& dev, tensor& dx) {
          return dev.activation_backward(act, y_cpu, dy, dx);
        },
        elem_atol, elem_rtol, "activation dx");
    }
  }
  tensor dx;
  auto bad = random_tensor({3, 3}, rng);
  check_error(gpu->activation_backward(activation::relu, x, bad, dx),
              ec::shape_mismatch, {"[3, 3]", "[7, 301]"});
}

BOOST_AUTO_TEST_CASE(max_pool_matches_cpu) {
  for (auto [k, s, pad] : {std::tuple{3, 2, padding::same},
                           std::tuple{2, 2, padding::valid},
                           std::tuple{3, 1, padding::same}}) {
    BOOST_TEST_CONTEXT("pool " << k << "/" << s << " " << to_string(pad)) {
      auto g = pool_geom({3, 13, 12, 5}, k, s, pad);
      auto x = random_tensor(g.input_shape(), rng);
      tensor y_gpu, y_cpu;
      std::vector<int32_t> a_gpu, a_cpu;
      SYNCFAC_REQUIRE_OK(gpu->max_pool_forward(g, x, y_gpu, a_gpu));
      SYNCFAC_REQUIRE_OK(cpu->max_pool_forward(g, x, y_cpu, a_cpu));
      BOOST_CHECK(y_gpu == y_cpu);
      BOOST_CHECK(a_gpu == a_cpu);
      auto dy = random_tensor(g.output_shape(), rng);
      tensor dx_gpu, dx_cpu;
      SYNCFAC_REQUIRE_OK(gpu->max_pool_backward(g, dy, a_cpu, dx_gpu));
      SYNCFAC_REQUIRE_OK(cpu->max_pool_backward(g, dy, a_cpu, dx_cpu));
      // Overlapping windows add in a different order (atomics).
      check_close(dx_gpu, dx_cpu, 1e-6, 1e-6, "pool dx");
    }
  }
  // A stray argmax is refused like on the CPU, and nothing is written.
  auto g = pool_geom({2, 4, 4, 1}, 2, 2, padding::valid);
  tensor dy(g.output_shape());
  // Valid indices (each image's first element), but the last one.
  std::vector<int32_t> arg(static_cast<size_t>(dy.size()));
  for (size_t i = 0; i < arg.size(); ++i)
    arg[i] = static_cast<int32_t>(i / 4 * 16);
  arg.back() = 1000;
  tensor dx({1});
  auto e_gpu = gpu->max_pool_backward(g, dy, arg, dx);
  auto e_cpu = cpu->max_pool_backward(g, dy, arg, dx);
  check_error(e_gpu, ec::invalid_argument, {"argmax[7] = 1000"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
  BOOST_CHECK_EQUAL(dx.size(), 1);
}

// Average pooling, batch normalisation and dropout's product: the CUDA
// kernels against the host defaults (kernels/average_pool.cpp,
// kernels/batch_norm.cpp).
BOOST_AUTO_TEST_CASE(avg_pool_matches_cpu) {
  for (auto [k, s, pad] : {std::tuple{3, 2, padding::same},
                           std::tuple{2, 2, padding::valid},
                           std::tuple{3, 1, padding::same},
                           std::tuple{2, 3, padding::same}}) {
    BOOST_TEST_CONTEXT("pool " << k << "/" << s << " " << to_string(pad)) {
      auto g = pool_geom({3, 13, 12, 5}, k, s, pad);
      auto x = random_tensor(g.input_shape(), rng);
      check_matches_cpu(
        *gpu, *cpu,
        [&](backend& dev, tensor& y) { return dev.avg_pool_forward(g, x, y); },
        1e-6, 1e-6, "avg_pool y");
      auto dy = random_tensor(g.output_shape(), rng);
      check_matches_cpu(
        *gpu, *cpu,
        [&](backend& dev, tensor& dx) {
          return dev.avg_pool_backward(g, dy, dx);
        },
        1e-6, 1e-6, "avg_pool dx");
    }
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_matches_cpu) {
  for (auto act : {activation::identity, activation::relu}) {
    BOOST_TEST_CONTEXT(to_string(act)) {
      auto x = random_tensor({6, 7, 5, 4}, rng, -2.0f, 3.0f);
      tensor mean_gpu, var_gpu, mean_cpu, var_cpu;
      SYNCFAC_REQUIRE_OK(gpu->batch_norm_statistics(x, mean_gpu, var_gpu));
      SYNCFAC_REQUIRE_OK(cpu->batch_norm_statistics(x, mean_cpu, var_cpu));
      check_close(mean_gpu, mean_cpu, 1e-6, 1e-6, "mean");
      check_close(var_gpu, var_cpu, 1e-6, 1e-6, "variance");
      auto gamma = random_tensor({4}, rng, 0.5f, 2.0f);
      auto beta = random_tensor({4}, rng);
      tensor inv_std({4});
      for (int64_t c = 0; c < 4; ++c)
        inv_std[c] = 1.0f / std::sqrt(var_cpu[c] + 1e-3f);
      auto y_cpu = check_matches_cpu(
        *gpu, *cpu,
        [&](backend& dev, tensor& y) {
          return dev.batch_norm_forward(x, gamma, beta, mean_cpu, inv_std,
                                        act, y);
        },
        1e-5, 1e-5, "y");
      auto dy = random_tensor(x.shape(), rng);
      tensor scratch_gpu, dg_gpu, db_gpu, dx_gpu, scratch_cpu, dg_cpu, db_cpu,
        dx_cpu;
      SYNCFAC_REQUIRE_OK(gpu->batch_norm_backward(x, gamma, mean_cpu, inv_std,
                                                  y_cpu, dy, act, scratch_gpu,
                                                  dg_gpu, db_gpu, &dx_gpu));
      SYNCFAC_REQUIRE_OK(cpu->batch_norm_backward(x, gamma, mean_cpu, inv_std,
                                                  y_cpu, dy, act, scratch_cpu,
                                                  dg_cpu, db_cpu, &dx_cpu));
      check_close(dg_gpu, dg_cpu, 1e-4, 1e-5, "dgamma");
      check_close(db_gpu, db_cpu, 1e-4, 1e-5, "dbeta");
      check_close(dx_gpu, dx_cpu, 1e-4, 1e-4, "dx");
    }
  }
  // Shapes that do not fit are refused as on the CPU.
  tensor x({4, 3});
  tensor bad({2});
  tensor y;
  auto e_gpu = gpu->batch_norm_forward(x, bad, bad, bad, bad,
                                       activation::identity, y);
  auto e_cpu = cpu->batch_norm_forward(x, bad, bad, bad, bad,
                                       activation::identity, y);
  check_error(e_gpu, ec::shape_mismatch, {"gamma [2]", "3 channels"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
}

BOOST_AUTO_TEST_CASE(multiply_matches_cpu) {
  auto x = random_tensor({5, 9}, rng);
  auto m = random_tensor({5, 9}, rng);
  tensor y_gpu, y_cpu;
  SYNCFAC_REQUIRE_OK(gpu->multiply(x, m, y_gpu));
  SYNCFAC_REQUIRE_OK(cpu->multiply(x, m, y_cpu));
  BOOST_CHECK(y_gpu == y_cpu);
}

// The conv before a max-pool: the pool's backward through the conv's
// activation, and the conv's backward from that ds (the base class's
// compositions on the GPU, docs/cuda.md).
BOOST_AUTO_TEST_CASE(pool_backward_activated_and_conv_from_ds_match_cpu) {
  for (auto [k, s, pad] : {std::tuple{3, 2, padding::same},
                           std::tuple{2, 2, padding::valid},
                           std::tuple{3, 1, padding::same}})
    for (auto act : {activation::identity, activation::relu,
                     activation::tanh, activation::sigmoid}) {
      BOOST_TEST_CONTEXT("pool " << k << "/" << s << " " << to_string(pad)
                                 << " " << to_string(act)) {
        auto cg = conv_geom({3, 13, 12, 4}, {3, 3, 4, 5}, 1, 1,
                            padding::same);
        auto x = random_tensor(cg.input_shape(), rng);
        auto w = random_tensor(cg.kernel_shape(), rng, -0.3f, 0.3f);
        auto b = random_tensor({cg.out_c}, rng);
        tensor y;
        SYNCFAC_REQUIRE_OK(cpu->conv2d_forward(cg, x, w, b, act, y));
        auto g = pool_geom(y.shape(), k, s, pad);
        tensor pooled;
        std::vector<int32_t> arg;
        SYNCFAC_REQUIRE_OK(cpu->max_pool_forward(g, y, pooled, arg));
        auto dy = random_tensor(g.output_shape(), rng);
        // Overlapping windows add in a different order (atomics).
        auto ds_cpu = check_matches_cpu(
          *gpu, *cpu,
          [&](backend& dev, tensor& ds) {
            return dev.max_pool_backward_activated(g, dy, arg, pooled, act,
                                                   ds);
          },
          1e-6, 1e-6, "pool ds");
        tensor dw_g, db_g, dx_g, dw_c, db_c, dx_c, dx_d;
        SYNCFAC_REQUIRE_OK(gpu->conv2d_backward_from_ds(cg, x, w, ds_cpu, dw_g,
                                                        db_g, &dx_g));
        SYNCFAC_REQUIRE_OK(cpu->conv2d_backward_from_ds(cg, x, w, ds_cpu, dw_c,
                                                        db_c, &dx_c));
        check_close(dw_g, dw_c, 2e-4, 2e-4, "conv dw from ds");
        check_close(db_g, db_c, 2e-4, 2e-4, "conv db from ds");
        check_close(dx_g, dx_c, gemm_atol, gemm_rtol, "conv dx from ds");
        SYNCFAC_REQUIRE_OK(gpu->conv2d_backward_data_from_ds(cg, x, w, ds_cpu,
                                                             &dx_d));
        check_close(dx_d, dx_c, gemm_atol, gemm_rtol, "conv data dx from ds");
      }
    }
}

BOOST_AUTO_TEST_CASE(softmax_xent_matches_cpu) {
  int64_t n = 129, k = 10;
  auto logits = random_tensor({n, k}, rng, -5.0f, 5.0f);
  auto labels = random_labels(n, static_cast<int32_t>(k), rng);
  // dlogits within 1e-8: the GPU may fuse p * scale - scale into one FMA.
  check_loss_matches(*gpu, *cpu, &backend::softmax_xent_forward,
                     &backend::softmax_xent_backward, logits, labels, 1e-8,
                     "softmax");
  auto c_gpu = gpu->count_correct(logits, labels);
  auto c_cpu = cpu->count_correct(logits, labels);
  BOOST_REQUIRE(c_gpu && c_cpu);
  BOOST_CHECK_EQUAL(*c_gpu, *c_cpu);
  // Labels out of range: the CPU's error.
  labels[5] = 10;
  tensor p_gpu, p_cpu;
  float l_gpu = 0, l_cpu = 0;
  auto e_gpu = gpu->softmax_xent_forward(logits, labels, p_gpu, l_gpu);
  auto e_cpu = cpu->softmax_xent_forward(logits, labels, p_cpu, l_cpu);
  check_error(e_gpu, ec::invalid_argument, {"10"});
  BOOST_CHECK_EQUAL(render(e_gpu), render(e_cpu));
  BOOST_CHECK(!gpu->count_correct(logits, labels));
}

BOOST_AUTO_TEST_CASE(sigmoid_xent_matches_cpu) {
  int64_t n = 65, d = 784;
  auto logits = random_tensor({n, d}, rng, -30.0f, 30.0f);
  auto targets = random_tensor({n, d}, rng, 0.0f, 1.0f);
  check_loss_matches(*gpu, *cpu, &backend::sigmoid_xent_forward,
                     &backend::sigmoid_xent_backward, logits, targets, 1e-9,
                     "sigmoid");
  auto bad = random_tensor({n, d + 1}, rng);
  tensor p_gpu;
  float l_gpu = 0;
  check_error(gpu->sigmoid_xent_forward(logits, bad, p_gpu, l_gpu),
              ec::shape_mismatch, {"targets"});
}

// Gradients of the CUDA kernels against central differences of a probe
// loss computed on the GPU itself.
BOOST_AUTO_TEST_CASE(dense_gradients_by_finite_differences) {
  int64_t n = 6, in = 9, out = 5;
  auto x = random_tensor({n, in}, rng);
  auto w = random_tensor({in, out}, rng, -0.5f, 0.5f);
  auto b = random_tensor({out}, rng);
  auto r = random_tensor({n, out}, rng);
  auto act = activation::tanh;
  tensor y;
  SYNCFAC_REQUIRE_OK(gpu->dense_forward(x, w, b, act, y));
  tensor ds, dw, db, dx;
  SYNCFAC_REQUIRE_OK(gpu->dense_backward(x, w, y, r, act, ds, dw, db, &dx));
  auto loss = [&] {
    tensor yy;
    SYNCFAC_REQUIRE_OK(gpu->dense_forward(x, w, b, act, yy));
    return probe(yy, r);
  };
  check_gradient("dense dw", w, dw, loss);
  check_gradient("dense db", b, db, loss);
  check_gradient("dense dx", x, dx, loss);
}

BOOST_AUTO_TEST_CASE(conv2d_gradients_by_finite_differences) {
  auto g = conv_geom({2, 7, 6, 3}, {3, 3, 3, 4}, 2, 1, padding::same);
  auto x = random_tensor(g.input_shape(), rng);
  auto w = random_tensor(g.kernel_shape(), rng, -0.3f, 0.3f);
  auto b = random_tensor({g.out_c}, rng);
  auto r = random_tensor(g.output_shape(), rng);
  auto act = activation::sigmoid;
  tensor y;
  SYNCFAC_REQUIRE_OK(gpu->conv2d_forward(g, x, w, b, act, y));
  tensor ds, dw, db, dx;
  SYNCFAC_REQUIRE_OK(gpu->conv2d_backward(g, x, w, y, r, act, ds, dw, db, &dx));
  auto loss = [&] {
    tensor yy;
    SYNCFAC_REQUIRE_OK(gpu->conv2d_forward(g, x, w, b, act, yy));
    return probe(yy, r);
  };
  check_gradient("conv dw", w, dw, loss);
  check_gradient("conv db", b, db, loss);
  check_gradient("conv dx", x, dx, loss);
}

BOOST_AUTO_TEST_CASE(softmax_gradient_by_finite_differences) {
  int64_t n = 5, k = 7;
  auto logits = random_tensor({n, k}, rng, -2.0f, 2.0f);
  auto labels = random_labels(n, static_cast<int32_t>(k), rng);
  tensor p;
  float loss = 0;
  SYNCFAC_REQUIRE_OK(gpu->softmax_xent_forward(logits, labels, p, loss));
  tensor d;
  SYNCFAC_REQUIRE_OK(gpu->softmax_xent_backward(p, labels, d));
  check_gradient("softmax dlogits", logits, d, [&] {
    tensor pp;
    float l = 0;
    SYNCFAC_REQUIRE_OK(gpu->softmax_xent_forward(logits, labels, pp, l));
    return double{l};
  });
}

BOOST_AUTO_TEST_CASE(out_of_memory_is_reported_with_the_size) {
  // 1 PiB: more than any device has.
  int64_t bytes = int64_t{1} << 50;
  auto err = kfac->reserve_workspace(bytes);
  check_error(err, ec::unavailable,
              {"cuda:0", std::to_string(bytes) + " bytes", "cannot allocate"});
  // The backend still works afterwards.
  auto a = random_tensor({8, 8}, rng);
  tensor c;
  SYNCFAC_REQUIRE_OK(gpu->gemm(a, false, a, false, 1.0f, 0.0f, c));
  SYNCFAC_REQUIRE_OK(kfac->reserve_workspace(1 << 20));
}

// Residency: a GPU backend leaves its outputs on the device, where the next
// kernel reads them, until host code reads them; parameters made resident
// follow later host changes.

BOOST_AUTO_TEST_CASE(chained_kernels_keep_values_on_the_device) {
  auto x = random_tensor({64, 40}, rng);
  auto w1 = random_tensor({40, 30}, rng, -0.3f, 0.3f);
  auto b1 = random_tensor({30}, rng);
  auto w2 = random_tensor({30, 10}, rng, -0.3f, 0.3f);
  auto b2 = random_tensor({10}, rng);
  tensor h_g, y_g, h_c, y_c;
  SYNCFAC_REQUIRE_OK(gpu->dense_forward(x, w1, b1, activation::relu, h_g));
  SYNCFAC_REQUIRE_OK(gpu->dense_forward(h_g, w2, b2, activation::tanh, y_g));
  if (on_gpu) {
    BOOST_CHECK(h_g.where() == residency::device); // read on the device
    BOOST_CHECK(y_g.where() == residency::device);
  }
  SYNCFAC_REQUIRE_OK(cpu->dense_forward(x, w1, b1, activation::relu, h_c));
  SYNCFAC_REQUIRE_OK(cpu->dense_forward(h_c, w2, b2, activation::tanh, y_c));
  check_close(y_g, y_c, gemm_atol, gemm_rtol, "chained dense y");
  BOOST_CHECK(y_g.where() != residency::device);
  // A reshaped copy and a product aliasing its operands, all on the device.
  tensor flat_g;
  SYNCFAC_REQUIRE_OK(gpu->reshape_copy(h_g, {64 * 30}, flat_g));
  tensor sq_g, sq_c;
  SYNCFAC_REQUIRE_OK(gpu->gemm(h_g, true, h_g, false, 0.1f, 0.0f, sq_g));
  SYNCFAC_REQUIRE_OK(gpu->gemm(sq_g, false, sq_g, false, 0.1f, 1.0f, sq_g));
  if (on_gpu) {
    BOOST_CHECK(flat_g.where() == residency::device);
    BOOST_CHECK(sq_g.where() == residency::device);
  }
  SYNCFAC_REQUIRE_OK(cpu->gemm(h_c, true, h_c, false, 0.1f, 0.0f, sq_c));
  SYNCFAC_REQUIRE_OK(cpu->gemm(sq_c, false, sq_c, false, 0.1f, 1.0f, sq_c));
  check_close(sq_g, sq_c, 1e-3, 1e-4, "aliased product of device values");
  BOOST_CHECK_EQUAL(flat_g.shape_string(), "[1920]");
  check_error(gpu->reshape_copy(h_g, {7}, flat_g), ec::shape_mismatch,
              {"[64, 30]", "[7]"});
  BOOST_CHECK_EQUAL(flat_g.shape_string(), "[1920]"); // untouched
  check_close(tensor({64, 30}, flat_g.values()), h_c, gemm_atol, gemm_rtol,
              "reshaped copy");
}

BOOST_AUTO_TEST_CASE(resident_parameters_follow_host_changes) {
  auto x = random_tensor({16, 12}, rng);
  auto w = random_tensor({12, 5}, rng);
  auto b = random_tensor({5}, rng);
  SYNCFAC_REQUIRE_OK(gpu->make_resident(w));
  SYNCFAC_REQUIRE_OK(gpu->make_resident(b));
  if (on_gpu)
    BOOST_CHECK(w.where() == residency::both);
  tensor y_g, y_c;
  auto compare = [&](const char* what) {
    SYNCFAC_REQUIRE_OK(gpu->dense_forward(x, w, b, activation::identity, y_g));
    SYNCFAC_REQUIRE_OK(cpu->dense_forward(x, w, b, activation::identity, y_c));
    check_close(y_g, y_c, gemm_atol, gemm_rtol, what);
  };
  compare("resident parameters");
  w[3] += 1.0f; // host changes: the device copies are stale now
  b.values()[0] -= 2.0f;
  BOOST_CHECK(w.where() == residency::host);
  compare("parameters changed on the host");
  SYNCFAC_REQUIRE_OK(gpu->make_resident(w));
  compare("parameters made resident again");
  w.data()[7] = 5.0f;
  SYNCFAC_REQUIRE_OK(gpu->make_resident(w));
  SYNCFAC_REQUIRE_OK(gpu->make_resident(w)); // current already: no-op
  compare("changed and made resident again");
}

BOOST_AUTO_TEST_CASE(device_values_outlive_their_backend_and_cross_threads) {
  auto x = random_tensor({32, 8}, rng);
  auto w = random_tensor({8, 6}, rng);
  auto b = random_tensor({6}, rng);
  tensor y_c;
  SYNCFAC_REQUIRE_OK(cpu->dense_forward(x, w, b, activation::sigmoid, y_c));
  tensor after_backend, other_thread;
  {
    auto dev = another_backend();
    SYNCFAC_REQUIRE_OK(dev->dense_forward(x, w, b, activation::sigmoid,
                                          after_backend));
    SYNCFAC_REQUIRE_OK(dev->dense_forward(x, w, b, activation::sigmoid,
                                          other_thread));
  }
  check_close(after_backend, y_c, gemm_atol, gemm_rtol,
              "read after the backend is gone");
  tensor read_there;
  std::thread reader{[&] { read_there = other_thread; }};
  reader.join();
  check_close(read_there, y_c, gemm_atol, gemm_rtol,
              "read on another thread");
}

// A tensor another GPU left on its device, read by this backend: the fetch
// selects the other GPU, and this backend's later launches and cuBLAS calls
// in the same call must run on its own again. Needs two GPUs (the
// self-check runs the same logic with CPU backends).
BOOST_AUTO_TEST_CASE(inputs_on_another_gpu_keep_this_gpu_current) {
#ifdef SYNCFAC_CUDA_TESTS_ON_CPU
  auto other = make_cpu_backend(1);
#else
  if (cuda::device_count() < 2) {
    BOOST_TEST_MESSAGE("one CUDA device: nothing to check");
    return;
  }
  auto made = cuda::make_cuda_backend(1);
  BOOST_REQUIRE_MESSAGE(made, (made ? std::string{} : render(made.error())));
  auto other = std::move(*made);
#endif
  auto x = random_tensor({24, 10}, rng);
  auto w1 = random_tensor({10, 12}, rng, -0.3f, 0.3f);
  auto b1 = random_tensor({12}, rng);
  auto w2 = random_tensor({12, 7}, rng, -0.3f, 0.3f);
  auto b2 = random_tensor({7}, rng);
  tensor h_c, y_c, z_c;
  SYNCFAC_REQUIRE_OK(cpu->dense_forward(x, w1, b1, activation::relu, h_c));
  SYNCFAC_REQUIRE_OK(cpu->dense_forward(h_c, w2, b2, activation::tanh, y_c));
  SYNCFAC_REQUIRE_OK(cpu->activation_forward(activation::sigmoid, y_c, z_c));
  tensor h, y, z;
  // Twice: the second time y and z reuse their blocks, so no allocation
  // selects this backend's device in passing.
  for (int round = 0; round < 2; ++round) {
    BOOST_TEST_CONTEXT("round " << round) {
      SYNCFAC_REQUIRE_OK(other->dense_forward(x, w1, b1, activation::relu,
                                              h));
      SYNCFAC_REQUIRE_OK(gpu->dense_forward(h, w2, b2, activation::tanh, y));
      SYNCFAC_REQUIRE_OK(gpu->activation_forward(activation::sigmoid, y, z));
      check_close(z, z_c, gemm_atol, gemm_rtol, "read from another GPU");
    }
  }
}

BOOST_AUTO_TEST_CASE(model_training_steps_match_cpu) {
  // The runtime's use: parameters resident, activations and gradients left
  // on the device, host SGD updates in between (staleness on every step).
  auto m_g = model::make(model_spec{}, 7);
  auto m_c = model::make(model_spec{}, 7);
  BOOST_REQUIRE(m_g && m_c);
  auto images = random_tensor({16, 28, 28, 1}, rng, 0.0f, 1.0f);
  auto labels = random_labels(16, 10, rng);
  for (int step = 0; step < 3; ++step) {
    BOOST_TEST_CONTEXT("step " << step) {
      auto r_g = (*m_g)->forward_backward(*gpu, images, labels);
      auto r_c = (*m_c)->forward_backward(*cpu, images, labels);
      BOOST_REQUIRE(r_g && r_c);
      BOOST_CHECK_CLOSE(r_g->loss_sum, r_c->loss_sum, 1e-2);
      BOOST_CHECK_EQUAL(r_g->correct, r_c->correct);
      for (auto* m : {&**m_g, &**m_c}) {
        auto& params = m->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          const auto& g = m->gradients()[i].value;
          for (int64_t k = 0; k < g.size(); ++k)
            params[i].value[k] -= 0.05f * g[k];
        }
      }
    }
  }
  const auto& p_g = (*m_g)->parameters();
  const auto& p_c = (*m_c)->parameters();
  for (size_t i = 0; i < p_g.size(); ++i)
    check_close(p_g[i].value, p_c[i].value, 1e-3, 1e-3,
                "parameter " + p_g[i].name);
}

#ifndef SYNCFAC_CUDA_TESTS_ON_CPU
BOOST_AUTO_TEST_CASE(an_output_the_device_cannot_hold_is_reported) {
  // 4 MiB of inputs, 4 TiB of output: the device copy of y cannot exist.
  auto x = random_tensor({int64_t{1} << 20, 1}, rng);
  auto w = random_tensor({1, int64_t{1} << 20}, rng);
  auto b = random_tensor({int64_t{1} << 20}, rng);
  tensor y;
  auto err = gpu->dense_forward(x, w, b, activation::identity, y);
  check_error(err, ec::unavailable,
              {"cuda:0", "4398046511104 bytes", "dense output"});
  BOOST_CHECK(y.empty());
  // The backend carries on.
  auto small = random_tensor({4, 1}, rng);
  auto w1 = random_tensor({1, 3}, rng);
  auto b1 = random_tensor({3}, rng);
  tensor y_g, y_c;
  SYNCFAC_REQUIRE_OK(gpu->dense_forward(small, w1, b1, activation::relu,
                                        y_g));
  SYNCFAC_REQUIRE_OK(cpu->dense_forward(small, w1, b1, activation::relu,
                                        y_c));
  check_close(y_g, y_c, gemm_atol, gemm_rtol, "after a failed allocation");
}

BOOST_AUTO_TEST_CASE(a_step_copies_the_batch_not_parameters_or_activations) {
  auto made = model::make(model_spec{}, 3);
  BOOST_REQUIRE(made);
  auto& net = **made;
  auto images = random_tensor({32, 28, 28, 1}, rng, 0.0f, 1.0f);
  auto labels = random_labels(32, 10, rng);
  int64_t param_bytes = 0;
  for (const auto& p : net.parameters())
    param_bytes += p.value.size() * 4;
  auto step = [&] {
    BOOST_REQUIRE(net.forward_backward(*gpu, images, labels));
  };
  step(); // the parameters go over once
  auto t0 = cuda::transfers(*gpu);
  BOOST_CHECK_GE(t0.to_device, param_bytes);
  step(); // unchanged parameters, nothing read on the host
  auto t1 = cuda::transfers(*gpu);
  auto up = t1.to_device - t0.to_device;
  auto down = t1.to_host - t0.to_host;
  BOOST_TEST_MESSAGE("a step with resident parameters: " << up
                       << " bytes to the GPU, " << down << " back ("
                       << param_bytes << " bytes of parameters)");
  // Exactly the batch (the first convolution's forward and backward pass
  // read it), the labels (the loss, the accuracy and the loss gradient)
  // and the pooling indices (the interface hands them to the host and
  // back); back come the indices, the per-row losses and the count. Not a
  // fraction of the parameters: the ConvNet's 14,682 parameters (57 KiB)
  // are far fewer than its 125,440 pooling indices.
  auto pool1 = pool_geom({32, 28, 28, 16}, 3, 2, padding::same);
  auto pool3 = pool_geom(pool1.output_shape(), 3, 2, padding::same);
  int64_t indices = element_count(pool1.output_shape())
                    + element_count(pool3.output_shape());
  int64_t n = 32;
  BOOST_CHECK_EQUAL(up, 4 * (2 * images.size() + 3 * n + indices));
  BOOST_CHECK_EQUAL(down, 4 * indices + 8 * n + 8);
  // Reading the gradients brings them over once; a host update of the
  // parameters sends them again on the next step.
  double sum = 0;
  for (const auto& g : net.gradients())
    for (auto v : g.value.values())
      sum += v;
  BOOST_CHECK(std::isfinite(sum));
  auto t2 = cuda::transfers(*gpu);
  BOOST_CHECK_GE(t2.to_host - t1.to_host, param_bytes);
  BOOST_CHECK_LT(t2.to_host - t1.to_host, param_bytes + param_bytes / 4);
  for (auto& p : net.parameters())
    p.value[0] += 1e-3f;
  step();
  auto t3 = cuda::transfers(*gpu);
  BOOST_CHECK_EQUAL(t3.to_device - t2.to_device, up + param_bytes);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
