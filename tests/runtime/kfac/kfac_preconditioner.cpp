#define BOOST_TEST_MODULE kfac_preconditioner
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>

#include <Eigen/Dense>

#include "kernels/backend.hpp"
#include "kernels/kfac_inverter.hpp"
#include "messages/kfac_messages.hpp"
#include "runtime/base/error.hpp"
#include "runtime/kfac/kfac_data.hpp"
#include "runtime/kfac/kfac_preconditioner.hpp"
#include "runtime/kfac/kfac_stats.hpp"
#include "runtime/kfac/kfac_update.hpp"
#include "runtime/model.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;

namespace {

/// flatten -> fc0 [4, 3]: one dense layer, small enough for explicit
/// Kronecker products.
struct tiny {
  std::unique_ptr<backend> dev = make_cpu_backend(1);
  std::unique_ptr<model> m;
  tensor images{5, 2, 2, 1};
  label_vector labels{0, 1, 2, 1, 0};

  tiny() {
    auto spec = test::mlp_spec(2, {});
    spec.num_classes = 3;
    spec.init = init_scheme::glorot;
    auto made = model::make(spec, 3);
    BOOST_REQUIRE_MESSAGE(made, test::why(made));
    m = std::move(*made);
    std::mt19937_64 rng{9};
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (auto& v : images.values())
      v = u(rng);
    BOOST_REQUIRE(m->forward_backward(*dev, images, labels));
  }
};

using matrix = Eigen::MatrixXd;

} // namespace

BOOST_FIXTURE_TEST_CASE(preconditioning_equals_the_explicit_kronecker_solve,
                        tiny) {
  kfac_config cfg;
  cfg.damping = 0.01f;
  auto pre = kfac_preconditioner::make(cfg, m->kfac_layers(),
                                       m->parameters());
  BOOST_REQUIRE_MESSAGE(pre, test::why(pre));
  BOOST_REQUIRE(!pre->update_factors(m->kfac_layers(), 1));
  BOOST_REQUIRE(!pre->update_inverses());
  BOOST_TEST(pre->ready_layers() == 1u);
  // Brute force: A from [x, 1], G from N * ds (ds of the mean loss).
  const auto& view = m->kfac_layers().at(0);
  const auto& x = *view.input;
  const auto& ds = *view.preactivation_grad;
  int n = 5;
  matrix A = matrix::Zero(5, 5);
  matrix G = matrix::Zero(3, 3);
  for (int e = 0; e < n; ++e) {
    Eigen::VectorXd a(5);
    for (int i = 0; i < 4; ++i)
      a(i) = x[e * 4 + i];
    a(4) = 1;
    Eigen::VectorXd g(3);
    for (int j = 0; j < 3; ++j)
      g(j) = n * ds[e * 3 + j];
    A += a * a.transpose() / n;
    G += g * g.transpose() / n;
  }
  double pi = std::sqrt((A.trace() / 5) / (G.trace() / 3));
  double lam = std::sqrt(0.01);
  matrix Ad = A + pi * lam * matrix::Identity(5, 5);
  matrix Gd = G + lam / pi * matrix::Identity(3, 3);
  matrix K(15, 15);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 5; ++k)
        for (int l = 0; l < 3; ++l)
          K(i * 3 + j, k * 3 + l) = Ad(i, k) * Gd(j, l);
  auto grads = m->gradients();
  Eigen::VectorXd v(15);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      v(i * 3 + j) = grads[0].value[i * 3 + j];
  for (int j = 0; j < 3; ++j)
    v(12 + j) = grads[1].value[j];
  Eigen::VectorXd expect = K.ldlt().solve(v);
  auto dot = pre->precondition(grads);
  BOOST_REQUIRE_MESSAGE(dot, test::why(dot));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      BOOST_TEST(std::abs(grads[0].value[i * 3 + j] - expect(i * 3 + j))
                   <= 1e-3 * (1 + std::abs(expect(i * 3 + j))),
                 "weight " << i << "," << j);
  for (int j = 0; j < 3; ++j)
    BOOST_TEST(std::abs(grads[1].value[j] - expect(12 + j))
               <= 1e-3 * (1 + std::abs(expect(12 + j))));
  BOOST_TEST(std::abs(*dot - v.dot(expect)) <= 1e-3 * (1 + std::abs(*dot)));
}

BOOST_FIXTURE_TEST_CASE(no_inverse_before_enough_covariance_updates, tiny) {
  kfac_config cfg;
  cfg.min_cov_updates = 3;
  auto pre = kfac_preconditioner::make(cfg, m->kfac_layers(),
                                       m->parameters());
  BOOST_REQUIRE(pre);
  // Inverting with no statistics at all would be 0/0: the guard skips it.
  BOOST_TEST(!pre->update_inverses());
  BOOST_TEST(pre->ready_layers() == 0u);
  auto grads = m->gradients();
  auto before = grads;
  BOOST_TEST(*pre->precondition(grads) == 0.0);
  BOOST_TEST(grads[0].value == before[0].value); // plain gradient
  for (int i = 0; i < 2; ++i)
    BOOST_REQUIRE(!pre->update_factors(m->kfac_layers(), 1));
  BOOST_TEST(!pre->update_inverses());
  BOOST_TEST(pre->ready_layers() == 0u);
  BOOST_REQUIRE(!pre->update_factors(m->kfac_layers(), 1));
  BOOST_TEST(!pre->update_inverses());
  BOOST_TEST(pre->ready_layers() == 1u);
}

BOOST_AUTO_TEST_CASE(invalid_settings_are_refused) {
  kfac_config cfg;
  cfg.cov_ema_decay = 1.0f;
  BOOST_TEST(cfg.validate());
  cfg = kfac_config{};
  cfg.damping = 0;
  BOOST_TEST(cfg.validate());
  cfg = kfac_config{};
  cfg.invert_every = 0;
  BOOST_TEST(render(cfg.validate()).find("invert_every") != std::string::npos);
  cfg = kfac_config{};
  cfg.stats_every = 0;
  BOOST_TEST(render(cfg.validate()).find("stats_every") != std::string::npos);
  // bfloat16 products are GEMMs of the explicit inverses only.
  cfg = kfac_config{};
  cfg.precision = product_precision::bf16;
  auto refused = render(cfg.validate());
  BOOST_TEST(refused.find("precision bf16") != std::string::npos);
  BOOST_TEST(refused.find("cholesky") != std::string::npos);
  cfg.mode = inverse_mode::explicit_inverse;
  BOOST_TEST(!cfg.validate());
  BOOST_TEST(!parse_fisher_type("bogus"));
  BOOST_TEST((*parse_inverse_mode("eigen") == inverse_mode::eigen));
  BOOST_TEST((*parse_product_precision("bf16") == product_precision::bf16));
  BOOST_TEST(!parse_product_precision("fp16"));
}

BOOST_AUTO_TEST_CASE(the_convnet_collection_and_layer_placement) {
  auto m = model::make(model_spec{}, 1);
  BOOST_REQUIRE(m);
  const auto& c = (*m)->kfac_collection();
  BOOST_REQUIRE(!c.validate());
  BOOST_REQUIRE_EQUAL(c.layers.size(), 3u);
  // The seeds' ConvNet: 5x5x1 -> 16, 5x5x16 -> 16 (both SAME on 28x28 and
  // 14x14), then 7*7*16 -> 10.
  BOOST_TEST(c.layers[0].a_dim == 26);
  BOOST_TEST(c.layers[0].g_dim == 16);
  BOOST_TEST(c.layers[0].locations == 28 * 28);
  BOOST_TEST(c.layers[1].a_dim == 401);
  BOOST_TEST(c.layers[1].locations == 14 * 14);
  BOOST_TEST(c.layers[2].a_dim == 785);
  BOOST_TEST(c.layers[2].g_dim == 10);
  BOOST_TEST(c.layers[2].locations == 1);
  BOOST_TEST((c.layers[2].kind == layer_kind::dense));
  BOOST_TEST((c.distribution == predictive_distribution::categorical));
  BOOST_TEST(c.find(c.layers[1].name) == &c.layers[1]);
  BOOST_TEST(c.find("nope") == nullptr);
  // Round-robin in layer order; by cost the 785 dense layer alone on one
  // actor, the two conv layers (401³ + 26³ < 785³) on the other.
  BOOST_TEST((place_layers(c.layers, 2, kfac_placement::round_robin)
              == std::vector<int32_t>{0, 1, 0}));
  BOOST_TEST((place_layers(c.layers, 2, kfac_placement::by_cost)
              == std::vector<int32_t>{1, 1, 0}));
  BOOST_TEST((place_layers(c.layers, 1, kfac_placement::by_cost)
              == std::vector<int32_t>{0, 0, 0}));
  BOOST_TEST(!parse_kfac_placement("random"));
  // A broken entry is named.
  auto bad = c;
  bad.layers[1].a_dim = 1;
  BOOST_TEST(render(bad.validate()).find(c.layers[1].name)
             != std::string::npos);
  bad = c;
  bad.layers[2].name = bad.layers[0].name;
  BOOST_TEST(render(bad.validate()).find("twice") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(statistics_as_rows_stand_for_the_matrices, tiny) {
  // 3 of the 5 examples: A (5 wide) comes as 3 rows, G (3 wide) as the
  // matrix, bit-identical to the matrices-only statistics.
  factor_sampling s;
  s.max_examples = 3;
  auto plain = layer_statistics(m->kfac_layers(), s, 1);
  auto rows = layer_statistics(m->kfac_layers(), s, 1, true);
  BOOST_REQUIRE_MESSAGE(plain, test::why(plain));
  BOOST_REQUIRE_MESSAGE(rows, test::why(rows));
  const auto& p = plain->at(0);
  const auto& r = rows->at(0);
  BOOST_TEST(r.a.empty());
  BOOST_REQUIRE(r.a_rows.x.shape() == (tensor_shape{3, 5}));
  BOOST_TEST(r.g == p.g);
  BOOST_TEST(r.g_rows.x.empty());
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) {
      double sum = 0;
      for (int k = 0; k < 3; ++k)
        sum += double{r.a_rows.x[k * 5 + i]} * r.a_rows.x[k * 5 + j];
      BOOST_TEST(std::abs(sum * r.a_rows.scale - p.a[i * 5 + j])
                   <= 1e-6 * (1 + std::abs(p.a[i * 5 + j])),
                 "A " << i << "," << j);
    }
  // The preconditioner folds matrices: rows are refused, nothing changes.
  kfac_config cfg;
  auto pre = kfac_preconditioner::make(cfg, m->kfac_layers(),
                                       m->parameters());
  BOOST_REQUIRE(pre);
  auto err = pre->update_factors(*rows);
  BOOST_REQUIRE(err);
  BOOST_TEST(err.code() == static_cast<uint8_t>(ec::invalid_argument));
  BOOST_TEST(render(err).find("come as rows") != std::string::npos,
             render(err));
  BOOST_TEST(!pre->update_inverses());
  BOOST_TEST(pre->ready_layers() == 0u);
  BOOST_REQUIRE(!pre->update_factors(*plain));
}

// A model of three dense layers of different sizes: inverted on two threads
// (the layers side by side), every inverse equals the one-thread inversion
// bit for bit, as do the preconditioned gradients.
BOOST_AUTO_TEST_CASE(two_threads_invert_the_layers_as_one_does) {
  auto spec = test::mlp_spec(4, {24, 9});
  spec.num_classes = 5;
  spec.init = init_scheme::glorot;
  auto made = model::make(spec, 3);
  BOOST_REQUIRE_MESSAGE(made, test::why(made));
  auto& m = **made;
  auto dev = make_cpu_backend(1);
  tensor images{16, 4, 4, 1};
  label_vector labels;
  std::mt19937_64 rng{4};
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (auto& v : images.values())
    v = u(rng);
  for (int i = 0; i < 16; ++i)
    labels.push_back(i % 5);
  BOOST_REQUIRE(m.forward_backward(*dev, images, labels));
  kfac_config cfg;
  cfg.damping = 0.01f;
  auto one = kfac_preconditioner::make(cfg, m.kfac_layers(), m.parameters());
  BOOST_REQUIRE_MESSAGE(one, test::why(one));
  BOOST_REQUIRE(!one->update_factors(m.kfac_layers(), 1));
  auto two = *one;
  BOOST_REQUIRE(!one->update_inverses(cpu_kfac_inverter(), 1));
  BOOST_REQUIRE(!two.update_inverses(cpu_kfac_inverter(), 2));
  BOOST_REQUIRE_EQUAL(one->ready_layers(), 3u);
  BOOST_REQUIRE_EQUAL(two.ready_layers(), 3u);
  auto s1 = one->slots();
  auto s2 = two.slots();
  for (size_t i = 0; i < s1.size(); ++i) {
    BOOST_TEST_CONTEXT("layer " << i) {
      BOOST_REQUIRE(s1[i].inverse != s2[i].inverse); // computed twice
      BOOST_TEST(s1[i].inverse->a.values() == s2[i].inverse->a.values());
      BOOST_TEST(s1[i].inverse->g.values() == s2[i].inverse->g.values());
      BOOST_TEST(s1[i].inverse->a_damping == s2[i].inverse->a_damping);
    }
  }
  auto g1 = m.gradients();
  auto g2 = g1;
  auto d1 = one->precondition(g1);
  auto d2 = two.precondition(g2);
  BOOST_REQUIRE(d1);
  BOOST_REQUIRE(d2);
  BOOST_TEST(*d1 == *d2);
  BOOST_TEST(*d1 > 0);
  for (size_t i = 0; i < g1.size(); ++i)
    BOOST_TEST(g1[i].value.values() == g2[i].value.values());
}
