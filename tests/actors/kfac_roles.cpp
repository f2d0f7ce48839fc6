#define BOOST_TEST_MODULE actors_kfac_roles
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <Eigen/Dense>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/covariance.hpp"
#include "actors/device_actor.hpp"
#include "actors/inverse.hpp"
#include "actors/ps_shard.hpp"
#include "kernels/cpu/kfac_inverse.hpp"
#include "runtime/base/error.hpp"
#include "runtime/kfac/kfac_update.hpp"
#include "actors/program_config.hpp"
#include "tests/actor_fixture.hpp"
#include "tests/helpers.hpp"
#include "tests/kfac_test_utils.hpp"

using namespace syncfac;
using namespace syncfac::test;
using namespace std::chrono_literals;
namespace tt = boost::test_tools;

namespace {

// -- tensors -----------------------------------------------------------------

/// x·a + y·b, elementwise (the hand-computed EMA and means).
tensor mix(float x, const tensor& a, float y, const tensor& b) {
  tensor out(a.shape());
  for (int64_t i = 0; i < a.size(); ++i)
    out[i] = x * a[i] + y * b[i];
  return out;
}

void require_close(const tensor& got, const tensor& want,
                   const std::string& what, double tol = 1e-5) {
  BOOST_REQUIRE_MESSAGE(got.shape() == want.shape(),
                        what << ": shape " << got.shape_string() << " vs "
                             << want.shape_string());
  // Absolute near zero, relative elsewhere.
  for (int64_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::abs(got[i] - want[i])
                 <= tol * std::max(1.0, std::abs(double{want[i]})),
               what << "[" << i << "]: " << got[i] << " vs " << want[i]);
}

// -- the layers --------------------------------------------------------------

/// A dense layer with `in` inputs and `out` outputs (a_dim in + 1).
kfac_layer dense_layer(const std::string& name, int64_t in, int64_t out) {
  return kfac_layer{name,          layer_kind::dense, name + "/w",
                    name + "/b",   in + 1,            out,
                    1};
}

/// fc0: a_dim 3, g_dim 2 (weight [2, 2], bias [2]).
kfac_layer fc0() {
  return dense_layer("fc0", 2, 2);
}

/// fc1: a_dim 4, g_dim 3.
kfac_layer fc1() {
  return dense_layer("fc1", 3, 3);
}

/// SPD factors of fc0 (3x3 and 2x2) and variations of them.
tensor a_stat(float k = 1.0f) {
  return mat(3, 3, {2.0f * k, 0.3f, 0.1f,       //
                    0.3f, 1.0f + k, 0.2f,       //
                    0.1f, 0.2f, 1.0f});
}

tensor g_stat(float k = 1.0f) {
  return mat(2, 2, {1.0f + k, 0.4f * k, 0.4f * k, 0.8f});
}

layer_stats stats_of(const kfac_layer& l, tensor a, tensor g) {
  return layer_stats{l.name, std::move(a), std::move(g), {}, {}};
}

stats_update update(int64_t step, int64_t examples,
                    std::vector<layer_stats> layers, int32_t worker = 0) {
  stats_update u;
  u.worker = worker;
  u.step = step;
  u.examples = examples;
  u.layers = std::move(layers);
  return u;
}

/// An update of fc0 alone.
stats_update fc0_update(int64_t step, float k, int64_t examples = 8,
                        int32_t worker = 0) {
  return update(step, examples, {stats_of(fc0(), a_stat(k), g_stat(k))},
                worker);
}

layer_factors factors_of(const kfac_layer& l, tensor a, tensor g,
                         int64_t cov_updates) {
  layer_factors f;
  f.layer = l.name;
  f.locations = l.locations;
  f.cov_updates = cov_updates;
  f.a = std::move(a);
  f.g = std::move(g);
  return f;
}

// -- a mock inverse actor ----------------------------------------------------

/// What the mock saw, shared with the test thread.
using mock_log = shared_log<factor_set>;

/// The inverse role plus: how many sets arrived (a sync point, since the
/// covariance actor's hand-off is in the mailbox before its ack leaves),
/// and "answer the requests you hold".
using mock_inverse_actor = inverse_actor::extend<
  caf::replies_to<caf::get_atom>::with<int64_t>,
  caf::reacts_to<caf::ok_atom>>;

struct mock_state {
  std::vector<caf::typed_response_promise<caf::ok_atom>> held;
};

mock_inverse_actor::behavior_type
mock_inverse(mock_inverse_actor::stateful_pointer<mock_state> self,
             std::shared_ptr<mock_log> log, bool hold) {
  return {
    [=](factors_atom, const factor_set& set) -> caf::result<caf::ok_atom> {
      {
        std::lock_guard<std::mutex> guard{log->mtx};
        log->sets.push_back(set);
      }
      if (!hold)
        return caf::ok_atom::value;
      self->state.held.push_back(self->make_response_promise<caf::ok_atom>());
      return self->state.held.back();
    },
    [=](status_atom) -> inverse_status { return {}; },
    [](rewire_atom, std::vector<ps_actor>&) {
      // Shards do not matter here: nothing is shipped.
    },
    [=](caf::get_atom) -> int64_t {
      std::lock_guard<std::mutex> guard{log->mtx};
      return static_cast<int64_t>(log->sets.size());
    },
    [=](caf::ok_atom) {
      auto held = std::move(self->state.held);
      self->state.held.clear();
      for (auto& p : held)
        p.deliver(caf::ok_atom::value);
    },
  };
}

// -- the fixture -------------------------------------------------------------

/// One dense layer's variables on a shard: weight [in, out], bias [out].
parameter_set layer_variables(const kfac_layer& l) {
  auto in = l.a_dim - 1;
  tensor w(tensor_shape{in, l.g_dim});
  for (int64_t i = 0; i < w.size(); ++i)
    w[i] = 0.1f * static_cast<float>(i + 1);
  tensor b(tensor_shape{l.g_dim});
  for (int64_t i = 0; i < b.size(); ++i)
    b[i] = -0.05f * static_cast<float>(i + 1);
  return {{l.weight_name, std::move(w)}, {l.bias_name, std::move(b)}};
}

constexpr float lr = 0.1f;

/// A covariance actor's count of updates received, folded, dropped as
/// stale and refused.
void check_updates(const covariance_status& st, int64_t received,
                   int64_t cov_updates, int64_t stale, int64_t refused) {
  BOOST_TEST(st.received == received);
  BOOST_TEST(st.cov_updates == cov_updates);
  BOOST_TEST(st.stale == stale);
  BOOST_TEST(st.refused == refused);
}

struct fixture : actor_fixture {
  /// Polls `done` until it holds; fails after 10 s.
  void wait_for(const std::string& what, const std::function<bool()>& done) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      BOOST_REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline,
                            "timed out waiting for " << what);
      std::this_thread::sleep_for(5ms);
    }
  }

  // -- spawning ---------------------------------------------------------------

  mock_inverse_actor mock(std::shared_ptr<mock_log> log, bool hold = false) {
    auto m = sys.spawn(mock_inverse, std::move(log), hold);
    spawned.push_back(caf::actor_cast<caf::actor>(m));
    return m;
  }

  covariance_actor covariance(std::vector<kfac_layer> layers,
                              std::vector<inverse_actor> inverses,
                              const kfac_config& kfac,
                              int32_t contributions = 1,
                              std::chrono::milliseconds timeout = 10s) {
    covariance_config c;
    c.layers = std::move(layers);
    c.kfac = kfac;
    c.contributions_per_step = contributions;
    c.inverses = std::move(inverses);
    c.inverse_of.assign(c.layers.size(), 0);
    c.request_timeout = timeout;
    return keep(spawn_covariance(sys, std::move(c)));
  }

  device_actor device() {
    return keep(spawn_device(sys, device_config{"cpu", 1}));
  }

  /// A K-FAC shard holding `layers` (adam momentum 0.9, lr 0.1).
  ps_actor shard(std::vector<kfac_layer> layers, const kfac_config& kfac) {
    ps_shard_config c;
    for (const auto& l : layers)
      for (auto& v : layer_variables(l))
        c.variables.push_back(std::move(v));
    c.optimizer = test::optimizer_of(optimizer_kind::kfac, lr);
    c.optimizer.momentum = 0.9f;
    c.optimizer.kfac = kfac;
    c.kfac_layers = std::move(layers);
    return keep(spawn_ps_shard(sys, std::move(c)));
  }

  inverse_actor inverse(std::vector<kfac_layer> layers,
                        const kfac_config& kfac, device_actor dev,
                        ps_actor ps) {
    inverse_config c;
    c.layers = std::move(layers);
    c.kfac = kfac;
    c.device = std::move(dev);
    c.shards = {std::move(ps)};
    c.shard_of.assign(c.layers.size(), 0);
    return keep(spawn_inverse(sys, std::move(c)));
  }

  // -- requests ---------------------------------------------------------------

  stats_ack send(const covariance_actor& cov, const stats_update& u) {
    return require<stats_ack>(cov, stats_atom::value, u);
  }

  covariance_status status(const covariance_actor& cov) {
    return require<covariance_status>(cov, status_atom::value);
  }

  inverse_status status(const inverse_actor& inv) {
    return require<inverse_status>(inv, status_atom::value);
  }

  shard_status status(const ps_actor& ps) {
    return require<shard_status>(ps, status_atom::value);
  }

  /// The sets the mock has received, after its mailbox caught up, and
  /// once there are `at_least` (bounded: 5 s). A hand-off made while the
  /// previous one is unanswered waits for that answer, so it can leave
  /// after the ack of the update that caused it.
  std::vector<factor_set> received(const mock_inverse_actor& m,
                                   const std::shared_ptr<mock_log>& log,
                                   size_t at_least = 0) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    for (;;) {
      require<int64_t>(m, caf::get_atom::value);
      auto sets = log->get();
      if (sets.size() >= at_least
          || std::chrono::steady_clock::now() >= deadline)
        return sets;
      std::this_thread::sleep_for(1ms);
    }
  }
};

kfac_config settings(int64_t invert_every, float decay = 0.8f) {
  kfac_config k;
  k.cov_ema_decay = decay;
  k.invert_every = invert_every;
  k.damping = 0.01f;
  return k;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(kfac_roles, fixture)

// -- covariance: the moving average ------------------------------------------

BOOST_AUTO_TEST_CASE(the_ema_of_two_updates_is_the_normalised_average) {
  auto log = std::make_shared<mock_log>();
  auto m = mock(log);
  auto cov = covariance({fc0()}, {m}, settings(1, 0.8f));
  auto ack = send(cov, fc0_update(0, 1.0f));
  BOOST_TEST(ack.accepted);
  BOOST_TEST(ack.cov_updates == 1);
  BOOST_TEST(send(cov, fc0_update(1, 3.0f)).cov_updates == 2);
  auto sets = received(m, log, 2);
  BOOST_REQUIRE_EQUAL(sets.size(), 2u);
  // The first update is the batch statistic itself.
  BOOST_TEST(sets[0].step == 0);
  BOOST_REQUIRE_EQUAL(sets[0].layers.size(), 1u);
  const auto& f0 = sets[0].layers[0];
  BOOST_TEST(f0.layer == "fc0");
  BOOST_TEST(f0.cov_updates == 1);
  BOOST_TEST(f0.locations == 1);
  require_close(f0.a, a_stat(1.0f), "A after one update", 1e-6);
  require_close(f0.g, g_stat(1.0f), "G after one update", 1e-6);
  // raw = 0.8·0.2·x1 + 0.2·x2 over the weight 0.8·0.2 + 0.2.
  BOOST_TEST(sets[1].step == 1);
  const auto& f1 = sets[1].layers[0];
  BOOST_TEST(f1.cov_updates == 2);
  const float w = 0.16f + 0.2f;
  require_close(f1.a, mix(0.16f / w, a_stat(1.0f), 0.2f / w, a_stat(3.0f)),
                "A after two updates");
  require_close(f1.g, mix(0.16f / w, g_stat(1.0f), 0.2f / w, g_stat(3.0f)),
                "G after two updates");
  auto st = status(cov);
  check_updates(st, 2, 2, 0, 0);
  BOOST_TEST(st.factor_sets_sent == 2);
  BOOST_TEST(st.send_failures == 0);
}

BOOST_AUTO_TEST_CASE(contributions_of_one_step_are_averaged_by_examples) {
  auto log = std::make_shared<mock_log>();
  auto m = mock(log);
  auto cov = covariance({fc0()}, {m}, settings(1, 0.5f), 2);
  auto first = send(cov, fc0_update(0, 1.0f, 1, 0));
  BOOST_TEST(first.accepted);
  BOOST_TEST(first.cov_updates == 0);
  BOOST_TEST(received(m, log).empty());
  // The second contribution completes step 0: (1·x1 + 3·x2) / 4.
  BOOST_TEST(send(cov, fc0_update(0, 2.0f, 3, 1)).cov_updates == 1);
  auto mean_a = mix(0.25f, a_stat(1.0f), 0.75f, a_stat(2.0f));
  auto mean_g = mix(0.25f, g_stat(1.0f), 0.75f, g_stat(2.0f));
  auto sets = received(m, log, 1);
  BOOST_REQUIRE_EQUAL(sets.size(), 1u);
  require_close(sets[0].layers[0].a, mean_a, "A of step 0");
  require_close(sets[0].layers[0].g, mean_g, "G of step 0");
  // Step 1 gets one contribution only; step 2's first folds it anyway.
  BOOST_TEST(send(cov, fc0_update(1, 4.0f, 5, 0)).cov_updates == 1);
  auto ack = send(cov, fc0_update(2, 5.0f, 5, 1));
  BOOST_TEST(ack.accepted);
  BOOST_TEST(ack.cov_updates == 2);
  sets = received(m, log, 2);
  BOOST_REQUIRE_EQUAL(sets.size(), 2u);
  BOOST_TEST(sets[1].step == 1);
  // raw = 0.25·mean0 + 0.5·x(step 1), weight 0.75.
  require_close(sets[1].layers[0].a,
                mix(0.25f / 0.75f, mean_a, 0.5f / 0.75f, a_stat(4.0f)),
                "A after step 1");
  BOOST_TEST(status(cov).cov_updates == 2);
}

BOOST_AUTO_TEST_CASE(stale_updates_are_dropped_and_counted) {
  auto log = std::make_shared<mock_log>();
  auto m = mock(log);
  auto cov = covariance({fc0()}, {m}, settings(1), 2);
  send(cov, fc0_update(0, 1.0f, 4, 0));
  send(cov, fc0_update(0, 1.0f, 4, 1));
  // Step 0 is folded: a late third contribution is stale.
  auto late = send(cov, fc0_update(0, 9.0f, 4, 2));
  BOOST_TEST(!late.accepted);
  BOOST_TEST(late.cov_updates == 1);
  // Step 2 is pending; step 1 is older than it.
  BOOST_TEST(send(cov, fc0_update(2, 2.0f, 4, 0)).accepted);
  BOOST_TEST(!send(cov, fc0_update(1, 9.0f, 4, 1)).accepted);
  // Step 2 completes with its second contribution, untouched by step 1's.
  BOOST_TEST(send(cov, fc0_update(2, 2.0f, 4, 1)).cov_updates == 2);
  auto sets = received(m, log, 2);
  BOOST_REQUIRE_EQUAL(sets.size(), 2u);
  BOOST_TEST(sets[1].step == 2);
  auto decay = 0.8f;
  auto w = decay * 0.2f + 0.2f;
  require_close(sets[1].layers[0].a,
                mix(decay * 0.2f / w, a_stat(1.0f), 0.2f / w, a_stat(2.0f)),
                "A after step 2");
  auto st = status(cov);
  check_updates(st, 6, 2, 2, 0);
}

BOOST_AUTO_TEST_CASE(malformed_updates_are_refused_and_change_nothing) {
  auto log = std::make_shared<mock_log>();
  auto m = mock(log);
  auto cov = covariance({fc0(), fc1()}, {m}, settings(1), 2);
  auto good_a1 = [] { return stats_of(fc1(), identity(4), identity(3)); };
  auto good = [&](int64_t step, float k, int32_t worker) {
    return update(step, 2,
                  {stats_of(fc0(), a_stat(k), g_stat(k)), good_a1()},
                  worker);
  };
  // Step 0 pending with one contribution.
  BOOST_TEST(send(cov, good(0, 1.0f, 0)).accepted);
  auto nan_g = g_stat();
  nan_g[1] = std::numeric_limits<float>::quiet_NaN();
  struct bad_case {
    stats_update u;
    ec code;
    std::string needle;
  };
  // Several for a newer step: a refused update must not fold step 0.
  std::vector<bad_case> cases{
    {update(5, 2, {stats_of(fc0(), a_stat(), g_stat()), good_a1(),
                   stats_of(dense_layer("fc9", 2, 2), a_stat(), g_stat())}),
     ec::bad_message, "unknown layer 'fc9'"},
    {update(5, 2, {stats_of(fc0(), identity(2), g_stat()), good_a1()}),
     ec::bad_message, "layer 'fc0': A must be 3x3"},
    {update(5, 2, {stats_of(fc0(), a_stat(), identity(3)), good_a1()}),
     ec::bad_message, "layer 'fc0': G must be 2x2"},
    {update(0, 2, {stats_of(fc0(), a_stat(), nan_g), good_a1()}),
     ec::non_finite, "layer 'fc0'"},
    {update(5, 2, {good_a1()}), ec::bad_message, "layer 'fc0' is missing"},
    {update(0, 2, {good_a1(), good_a1()}), ec::bad_message,
     "layer 'fc1' appears twice"},
    {update(0, 0, {stats_of(fc0(), a_stat(), g_stat()), good_a1()}),
     ec::bad_message, "examples"},
    {update(-1, 2, {stats_of(fc0(), a_stat(), g_stat()), good_a1()}),
     ec::bad_message, "step"},
  };
  for (const auto& c : cases) {
    auto msg = failure(ask<stats_ack>(cov, stats_atom::value, c.u), c.code);
    BOOST_TEST(contains(msg, c.needle), msg);
    BOOST_TEST(contains(msg, "covariance actor 0"), msg);
  }
  auto st = status(cov);
  auto refused = static_cast<int64_t>(cases.size());
  check_updates(st, refused + 1, 0, 0, refused);
  BOOST_TEST(received(m, log).empty());
  // Step 0's second contribution: the mean of the two good ones only.
  BOOST_TEST(send(cov, good(0, 3.0f, 1)).cov_updates == 1);
  auto sets = received(m, log, 1);
  BOOST_REQUIRE_EQUAL(sets.size(), 1u);
  BOOST_REQUIRE_EQUAL(sets[0].layers.size(), 2u);
  require_close(sets[0].layers[0].a,
                mix(0.5f, a_stat(1.0f), 0.5f, a_stat(3.0f)), "A of fc0");
  require_close(sets[0].layers[1].a, identity(4), "A of fc1");
}

// -- covariance: statistics as rows ------------------------------------------

namespace {

/// m rows of width w with values from k (no two alike).
gram_rows rows_of(int64_t m, int64_t w, float k, double scale) {
  tensor x({m, w});
  for (int64_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(k * 1.7f + static_cast<float>(i) * 0.61f);
  return gram_rows{std::move(x), scale};
}

/// scale · xᵀx in double.
std::vector<double> gram(const gram_rows& r) {
  auto m = r.x.dim(0);
  auto w = r.x.dim(1);
  std::vector<double> out(static_cast<size_t>(w * w), 0.0);
  for (int64_t i = 0; i < w; ++i)
    for (int64_t j = 0; j < w; ++j)
      for (int64_t k = 0; k < m; ++k)
        out[static_cast<size_t>(i * w + j)]
          += r.scale * r.x[k * w + i] * r.x[k * w + j];
  return out;
}

std::vector<double> as_doubles(const tensor& t) {
  return {t.values().begin(), t.values().end()};
}

tensor as_tensor(const std::vector<double>& v, int64_t w, double divisor) {
  tensor out({w, w});
  for (int64_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>(v[static_cast<size_t>(i)] / divisor);
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(rows_are_folded_as_the_matrices_they_stand_for) {
  // fc: a_dim 6, g_dim 2. Two workers per step: worker 0 sends A as 2 rows
  // (3 blocks outgrow the 6 columns and fold early), worker 1 alternates
  // rows and a matrix; G comes as one row from worker 1 in odd steps.
  auto fc = dense_layer("fc", 5, 2);
  const float decay = 0.8f;
  auto log = std::make_shared<mock_log>();
  auto m = mock(log);
  auto cov = covariance({fc}, {m}, settings(5, decay), 2);
  std::vector<double> a_raw(36, 0.0), g_raw(4, 0.0);
  double weight = 0.0;
  for (int64_t step = 0; step < 5; ++step) {
    auto k = static_cast<float>(step);
    layer_stats w0{fc.name, {}, g_stat(k), rows_of(2, 6, k, 0.5), {}};
    layer_stats w1{fc.name, {}, {}, {}, {}};
    if (step % 2 == 0) {
      w1.a = as_tensor(gram(rows_of(4, 6, k + 0.5f, 0.25)), 6, 1.0);
      w1.g = g_stat(k + 1.0f);
    } else {
      w1.a_rows = rows_of(3, 6, k + 0.5f, 1.0 / 3.0);
      w1.g_rows = rows_of(1, 2, k, 2.0);
    }
    // The step's mean, by examples (3 and 1), in double.
    auto a0 = gram(w0.a_rows);
    auto a1 = w1.a.empty() ? gram(w1.a_rows) : as_doubles(w1.a);
    auto g0 = as_doubles(w0.g);
    auto g1 = w1.g.empty() ? gram(w1.g_rows) : as_doubles(w1.g);
    for (size_t i = 0; i < a_raw.size(); ++i)
      a_raw[i] = decay * a_raw[i] + (1.0 - decay) * (0.75 * a0[i] + 0.25 * a1[i]);
    for (size_t i = 0; i < g_raw.size(); ++i)
      g_raw[i] = decay * g_raw[i] + (1.0 - decay) * (0.75 * g0[i] + 0.25 * g1[i]);
    weight = decay * weight + (1.0 - decay);
    BOOST_TEST(send(cov, update(step, 3, {w0}, 0)).accepted);
    BOOST_TEST(send(cov, update(step, 1, {w1}, 1)).accepted);
  }
  auto sets = received(m, log, 1);
  BOOST_REQUIRE_EQUAL(sets.size(), 1u);
  BOOST_TEST(sets[0].step == 4);
  BOOST_REQUIRE_EQUAL(sets[0].layers.size(), 1u);
  require_close(sets[0].layers[0].a, as_tensor(a_raw, 6, weight),
                "A after 5 steps of rows and matrices");
  require_close(sets[0].layers[0].g, as_tensor(g_raw, 2, weight),
                "G after 5 steps of rows and matrices");
  const auto& a = sets[0].layers[0].a;
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < i; ++j)
      BOOST_TEST(a[i * 6 + j] == a[j * 6 + i]);
  BOOST_TEST(status(cov).cov_updates == 5);
}

BOOST_AUTO_TEST_CASE(malformed_rows_are_refused_and_change_nothing) {
  auto log = std::make_shared<mock_log>();
  auto m = mock(log);
  auto cov = covariance({fc0()}, {m}, settings(1));
  auto with = [](tensor a, tensor g, gram_rows a_rows,
                 gram_rows g_rows) {
    return update(0, 2, {layer_stats{"fc0", std::move(a), std::move(g),
                                     std::move(a_rows), std::move(g_rows)}});
  };
  auto nan_rows = rows_of(2, 3, 1.0f, 0.5);
  nan_rows.x[4] = std::numeric_limits<float>::infinity();
  struct bad_case {
    stats_update u;
    ec code;
    std::string needle;
  };
  std::vector<bad_case> cases{
    {with({}, g_stat(), rows_of(2, 4, 1.0f, 0.5), {}), ec::bad_message,
     "A rows must be [m, 3], got [2, 4]"},
    {with(a_stat(), g_stat(), rows_of(2, 3, 1.0f, 0.5), {}),
     ec::bad_message, "A comes both as a matrix and as rows"},
    {with({}, g_stat(), rows_of(2, 3, 1.0f, 0.0), {}), ec::bad_message,
     "A rows' scale must be positive"},
    {with(a_stat(), {}, {}, rows_of(1, 2, 1.0f, -1.0)), ec::bad_message,
     "G rows' scale must be positive"},
    {with({}, g_stat(), nan_rows, {}), ec::non_finite, "layer 'fc0'"},
  };
  for (const auto& c : cases) {
    auto msg = failure(ask<stats_ack>(cov, stats_atom::value, c.u), c.code);
    BOOST_TEST(contains(msg, c.needle), msg);
  }
  auto st = status(cov);
  BOOST_TEST(st.refused == static_cast<int64_t>(cases.size()));
  BOOST_TEST(st.cov_updates == 0);
  BOOST_TEST(received(m, log).empty());
}

BOOST_AUTO_TEST_CASE(fold_deferred_brings_the_matrices_up_to_date) {
  covariance_state st;
  covariance_layer l;
  l.info = fc0();
  l.a_raw = a_stat(1.0f);
  l.g_raw = g_stat(1.0f);
  l.weight = 0.36f;
  auto r = rows_of(2, 3, 2.0f, 0.5);
  l.a_deferred.raw_scale = 0.8;
  l.a_deferred.rows = {r};
  l.a_deferred.weights = {0.2};
  l.a_deferred.count = 2;
  st.layers.push_back(l);
  auto err = fold_deferred(st);
  BOOST_REQUIRE_MESSAGE(!err, render(err));
  const auto& got = st.layers[0];
  auto g = gram(r);
  tensor want({3, 3});
  for (int64_t i = 0; i < 9; ++i)
    want[i] = static_cast<float>(0.8 * a_stat(1.0f)[i] + 0.2 * g[i]);
  require_close(got.a_raw, want, "A after fold_deferred");
  BOOST_TEST(got.g_raw == g_stat(1.0f)); // nothing waited: untouched
  BOOST_TEST(got.weight == 0.36f);
  BOOST_TEST(got.a_deferred.rows.empty());
  BOOST_TEST(got.a_deferred.raw_scale == 1.0);
  BOOST_TEST(got.a_deferred.count == 0);
  // Again: nothing left to fold.
  auto before = got.a_raw;
  BOOST_REQUIRE(!fold_deferred(st));
  BOOST_TEST(st.layers[0].a_raw == before);
}

// -- covariance: hand-offs ---------------------------------------------------

BOOST_AUTO_TEST_CASE(the_cadence_decides_which_folds_hand_the_factors_on) {
  // Statistics of steps 0, 1, 3, 4, 5 (step 2's skipped) with
  // invert_every 3: counted hands off at the third fold (step 3), exact at
  // the step s with (s + 1) % 3 == 0 that came (step 5; step 2 did not).
  for (auto cadence : {kfac_cadence::counted, kfac_cadence::exact}) {
    BOOST_TEST_CONTEXT(to_string(cadence)) {
      auto log = std::make_shared<mock_log>();
      auto m = mock(log);
      auto k = settings(3);
      k.cadence = cadence;
      auto cov = covariance({fc0()}, {m}, k);
      for (int64_t step : {0, 1, 3, 4, 5})
        send(cov, fc0_update(step, 1.0f + static_cast<float>(step)));
      auto sets = received(m, log, 1);
      BOOST_REQUIRE_EQUAL(sets.size(), 1u);
      auto expected = cadence == kfac_cadence::counted ? 3 : 5;
      BOOST_TEST(sets[0].step == expected);
      BOOST_TEST(status(cov).cov_updates == 5);
      BOOST_TEST(status(cov).factor_sets_sent == 1);
    }
  }
  BOOST_TEST(!parse_kfac_cadence("sometimes"));
}

BOOST_AUTO_TEST_CASE(hand_offs_coalesce_while_one_is_in_flight) {
  auto log = std::make_shared<mock_log>();
  auto m = mock(log, true);
  auto cov = covariance({fc0()}, {m}, settings(1));
  send(cov, fc0_update(0, 1.0f));
  send(cov, fc0_update(1, 2.0f));
  send(cov, fc0_update(2, 3.0f));
  BOOST_TEST(received(m, log).size() == 1u);
  BOOST_TEST(status(cov).factor_sets_sent == 1);
  // Three were due: one sent, one waiting, one replaced by the next.
  BOOST_TEST(status(cov).factor_sets_due == 3);
  // The answer comes: the factors current now go, once.
  self->send(m, caf::ok_atom::value);
  wait_for("the coalesced hand-off",
           [&] { return received(m, log).size() == 2u; });
  auto sets = log->get();
  BOOST_TEST(sets[1].step == 2);
  BOOST_TEST(sets[1].layers[0].cov_updates == 3);
  auto st = status(cov);
  BOOST_TEST(st.factor_sets_sent == 2);
  BOOST_TEST(st.factor_sets_due == 3);
  BOOST_TEST(st.send_failures == 0);
}

BOOST_AUTO_TEST_CASE(failed_hand_offs_are_counted_and_retried_later) {
  auto log = std::make_shared<mock_log>();
  auto m = mock(log, true); // never answers
  auto cov = covariance({fc0()}, {m}, settings(1), 1, 100ms);
  send(cov, fc0_update(0, 1.0f));
  wait_for("the hand-off to time out",
           [&] { return status(cov).send_failures == 1; });
  auto st = status(cov);
  BOOST_TEST(contains(st.last_error, "inverse actor #0"), st.last_error);
  // Still serving, and the next fold hands off again.
  BOOST_TEST(send(cov, fc0_update(1, 2.0f)).accepted);
  BOOST_TEST(received(m, log, 2).size() == 2u);
  BOOST_TEST(status(cov).factor_sets_sent == 2);
}

BOOST_AUTO_TEST_CASE(an_inverse_actor_refusing_counts_as_a_send_failure) {
  auto k = settings(1);
  auto dev = device();
  auto ps = shard({fc0()}, k);
  // The inverse actor thinks fc0 has 4 inputs: it refuses the factors.
  auto inv = inverse({dense_layer("fc0", 3, 2)}, k, dev, ps);
  auto cov = covariance({fc0()}, {inv}, k);
  send(cov, fc0_update(0, 1.0f));
  wait_for("the refusal", [&] { return status(cov).send_failures == 1; });
  auto st = status(cov);
  BOOST_TEST(contains(st.last_error, "A must be 4x4"), st.last_error);
  BOOST_TEST(status(inv).refused == 1);
  BOOST_TEST(status(ps).kfac_ready == 0);
}

BOOST_AUTO_TEST_CASE(invalid_covariance_configs_are_refused) {
  auto log = std::make_shared<mock_log>();
  inverse_actor m = mock(log);
  auto bad = [&](const std::function<void(covariance_config&)>& edit,
                 const std::string& needle) {
    covariance_config c;
    c.layers = {fc0()};
    c.inverses = {m};
    c.inverse_of = {0};
    edit(c);
    auto spawned = spawn_covariance(sys, c);
    auto msg = failure(spawned, ec::invalid_config);
    BOOST_TEST(contains(msg, needle), msg);
  };
  bad([](auto& c) { c.layers.clear(); }, "no layers");
  bad([](auto& c) { c.layers.push_back(fc0()); }, "listed twice");
  bad([](auto& c) { c.contributions_per_step = 0; }, "contributions");
  bad([](auto& c) { c.inverse_of = {1}; }, "inverse actor #1");
  bad([](auto& c) { c.inverse_of.clear(); }, "inverse_of");
  bad([](auto& c) { c.inverses = {inverse_actor{}}; }, "not set");
  bad([](auto& c) { c.kfac.invert_every = 0; }, "invert_every");
  bad([](auto& c) { c.request_timeout = 0ms; }, "request_timeout");
  bad([](auto& c) { c.index = -1; }, "index");
}

// -- inverse actor -----------------------------------------------------------

BOOST_AUTO_TEST_CASE(factors_go_on_every_invert_every_folds_and_arrive) {
  auto k = settings(2);
  auto dev = device();
  auto ps = shard({fc0()}, k);
  auto inv = inverse({fc0()}, k, dev, ps);
  auto cov = covariance({fc0()}, {inv}, k);
  send(cov, fc0_update(0, 1.0f));
  BOOST_TEST(status(cov).factor_sets_sent == 0);
  BOOST_TEST(status(inv).received == 0);
  send(cov, fc0_update(1, 2.0f));
  BOOST_TEST(status(cov).factor_sets_sent == 1);
  wait_for("the first inverse on the shard",
           [&] { return status(ps).kfac_ready == 1; });
  wait_for("the inverse actor's answer",
           [&] { return status(inv).shipped == 1; });
  auto st = status(inv);
  BOOST_TEST(st.received == 1);
  BOOST_TEST(st.inversions == 1);
  BOOST_TEST(st.too_early == 0);
  BOOST_TEST(st.failed == 0);
  BOOST_TEST(st.ship_failures == 0);
  BOOST_TEST(st.invert_s >= 0.0);
  BOOST_TEST(status(ps).inverse_sets == 1);
  send(cov, fc0_update(2, 3.0f));
  BOOST_TEST(status(cov).factor_sets_sent == 1);
  send(cov, fc0_update(3, 4.0f));
  wait_for("the second inverse set",
           [&] { return status(ps).inverse_sets == 2; });
  wait_for("the covariance actor to see the answer", [&] {
    return status(inv).shipped == 2;
  });
  auto cs = status(cov);
  BOOST_TEST(cs.factor_sets_sent == 2);
  BOOST_TEST(cs.send_failures == 0);
  BOOST_TEST(cs.cov_updates == 4);
}

BOOST_AUTO_TEST_CASE(too_early_layers_are_counted_and_not_shipped) {
  auto k = settings(1);
  k.min_cov_updates = 3;
  auto dev = device();
  auto ps = shard({fc0()}, k);
  auto inv = inverse({fc0()}, k, dev, ps);
  // Directly: a set with too few updates is answered ok, nothing shipped.
  factor_set early;
  early.step = 0;
  early.layers = {factors_of(fc0(), a_stat(), g_stat(), 2)};
  BOOST_TEST(static_cast<bool>(ask<caf::ok_atom>(inv, factors_atom::value,
                                                 early)));
  auto st = status(inv);
  BOOST_TEST(st.too_early == 1);
  BOOST_TEST(st.inversions == 0);
  BOOST_TEST(st.shipped == 0);
  BOOST_TEST(status(ps).kfac_ready == 0);
  // Through the covariance actor: only the third fold is inverted.
  auto cov = covariance({fc0()}, {inv}, k);
  send(cov, fc0_update(0, 1.0f));
  send(cov, fc0_update(1, 1.0f));
  wait_for("two too-early sets", [&] { return status(inv).too_early == 3; });
  BOOST_TEST(status(ps).kfac_ready == 0);
  send(cov, fc0_update(2, 1.0f));
  wait_for("the inverse", [&] { return status(ps).kfac_ready == 1; });
  wait_for("the answer", [&] { return status(inv).shipped == 1; });
  BOOST_TEST(status(inv).inversions == 1);
  BOOST_TEST(status(cov).send_failures == 0);
}

BOOST_AUTO_TEST_CASE(hard_factors_are_reported_and_the_actors_keep_running) {
  auto k = settings(1);
  k.damping = 1e-6f;
  k.max_damping_retries = 0;
  auto dev = device();
  auto ps = shard({fc0(), fc1()}, k);
  auto inv = inverse({fc0(), fc1()}, k, dev, ps);
  // fc0 indefinite with no retries: fails; fc1 fine.
  factor_set set;
  set.step = 4;
  set.layers = {factors_of(fc0(), diagonal({1, -5, 1}), identity(2), 1),
                factors_of(fc1(), identity(4), identity(3), 1)};
  auto ok = ask<caf::ok_atom>(inv, factors_atom::value, set);
  BOOST_TEST(static_cast<bool>(ok), test::why(ok));
  auto st = status(inv);
  BOOST_TEST(st.failed == 1);
  BOOST_TEST(st.inversions == 1);
  BOOST_TEST(st.shipped == 1);
  BOOST_TEST(contains(st.last_error, "fc0"), st.last_error);
  BOOST_TEST(status(ps).kfac_ready == 1);
  // With retries: a mildly indefinite fc0 needs more damping and gets it.
  k.max_damping_retries = 4;
  auto ps2 = shard({fc0(), fc1()}, k);
  auto inv2 = inverse({fc0(), fc1()}, k, dev, ps2);
  set.layers[0] = factors_of(fc0(), diagonal({1, -0.01f, 1}), identity(2), 1);
  ok = ask<caf::ok_atom>(inv2, factors_atom::value, set);
  BOOST_TEST(static_cast<bool>(ok), test::why(ok));
  st = status(inv2);
  BOOST_TEST(st.damping_raised == 1);
  BOOST_TEST(st.failed == 0);
  BOOST_TEST(st.inversions == 2);
  BOOST_TEST(status(ps2).kfac_ready == 2);
  // A zero A with a tiny damping still inverts (the damping alone).
  set.layers = {factors_of(fc0(), tensor(tensor_shape{3, 3}), identity(2), 1)};
  ok = ask<caf::ok_atom>(inv, factors_atom::value, set);
  BOOST_TEST(static_cast<bool>(ok), test::why(ok));
  BOOST_TEST(status(inv).inversions == 2);
  BOOST_TEST(status(ps).kfac_ready == 2);
}

BOOST_AUTO_TEST_CASE(the_inverse_actor_refuses_factors_of_the_wrong_shape) {
  auto k = settings(1);
  auto dev = device();
  auto ps = shard({fc0()}, k);
  auto inv = inverse({fc0()}, k, dev, ps);
  struct bad_case {
    layer_factors f;
    std::string needle;
  };
  auto wrong_locations = factors_of(fc0(), a_stat(), g_stat(), 1);
  wrong_locations.locations = 4;
  std::vector<bad_case> cases{
    {factors_of(fc0(), identity(2), g_stat(), 1), "A must be 3x3"},
    {factors_of(fc0(), a_stat(), identity(3), 1), "G must be 2x2"},
    {wrong_locations, "4 locations, expected 1"},
    {factors_of(fc1(), identity(4), identity(3), 1), "unknown layer 'fc1'"},
  };
  for (const auto& c : cases) {
    factor_set set;
    set.layers = {c.f};
    auto msg = failure(ask<caf::ok_atom>(inv, factors_atom::value, set),
                       ec::bad_message);
    BOOST_TEST(contains(msg, c.needle), msg);
    BOOST_TEST(contains(msg, "inverse actor 0"), msg);
  }
  factor_set twice;
  twice.layers = {factors_of(fc0(), a_stat(), g_stat(), 1),
                  factors_of(fc0(), a_stat(), g_stat(), 1)};
  failure(ask<caf::ok_atom>(inv, factors_atom::value, twice),
          ec::bad_message);
  auto st = status(inv);
  BOOST_TEST(st.refused == static_cast<int64_t>(cases.size()) + 1);
  BOOST_TEST(st.received == st.refused);
  BOOST_TEST(st.inversions == 0);
  BOOST_TEST(status(ps).kfac_ready == 0);
  BOOST_TEST(status(ps).refused_inverses == 0);
}

BOOST_AUTO_TEST_CASE(invalid_inverse_configs_are_refused) {
  auto k = settings(1);
  auto dev = device();
  auto ps = shard({fc0()}, k);
  auto bad = [&](const std::function<void(inverse_config&)>& edit,
                 const std::string& needle) {
    inverse_config c;
    c.layers = {fc0()};
    c.kfac = k;
    c.device = dev;
    c.shards = {ps};
    c.shard_of = {0};
    edit(c);
    auto msg = failure(spawn_inverse(sys, c), ec::invalid_config);
    BOOST_TEST(contains(msg, needle), msg);
  };
  bad([](auto& c) { c.layers.clear(); }, "no layers");
  bad([](auto& c) { c.device = device_actor{}; }, "device");
  bad([](auto& c) { c.shard_of = {2}; }, "PS shard #2");
  bad([](auto& c) { c.shards = {ps_actor{}}; }, "not set");
  bad([](auto& c) { c.kfac.damping = 0; }, "damping");
  bad([](auto& c) { c.request_timeout = 0ms; }, "request_timeout");
}

// -- end to end --------------------------------------------------------------

namespace {


} // namespace

/// Stats → covariance → inverse (device) → shard, then one apply: the
/// parameter change is −lr · F̂⁻¹ ∇ computed explicitly in double.
void end_to_end(fixture& fx, inverse_mode mode) {
  auto k = settings(1, 0.3f);
  k.mode = mode;
  k.damping = 0.05f;
  auto dev = fx.device();
  auto ps = fx.shard({fc0()}, k);
  auto inv = fx.inverse({fc0()}, k, dev, ps);
  auto cov = fx.covariance({fc0()}, {inv}, k);
  auto A = a_stat(1.5f);
  auto G = g_stat(0.5f);
  fx.send(cov, update(0, 16, {stats_of(fc0(), A, G)}));
  fx.wait_for("the inverse on the shard",
              [&] { return fx.status(ps).kfac_ready == 1; });
  auto before = fx.require<shard_params>(ps, pull_atom::value);
  gradient_push push;
  push.worker = 0;
  push.local_step = 0;
  push.dense = {{"fc0/w", mat(2, 2, {0.3f, -0.1f, 0.2f, 0.4f})},
                {"fc0/b", vec({-0.5f, 0.25f})}};
  BOOST_TEST(fx.require<push_ack>(ps, push_atom::value, push).accepted);
  auto done = fx.require<applied>(ps, apply_atom::value, int64_t{0},
                                  int64_t{1});
  BOOST_TEST(done.global_step == 1);
  auto after = fx.require<shard_params>(ps, pull_atom::value);
  BOOST_TEST(fx.status(ps).preconditioned_applies == 1);
  // The explicit reference on the same inputs.
  matrix Ad = to_matrix(A);
  matrix Gd = to_matrix(G);
  matrix K;
  if (mode == inverse_mode::cholesky) {
    auto plan = cpu::factored_damping(A, G, k.damping, 1);
    K = kron(Ad + plan.a_damping * matrix::Identity(3, 3),
             Gd + plan.g_damping * matrix::Identity(2, 2));
  } else {
    K = kron(Ad, Gd) + double{k.damping} * matrix::Identity(6, 6);
  }
  auto grad = to_matrix(layer_matrix(push.dense[0].value,
                                     push.dense[1].value));
  matrix step = explicit_step(K, grad);
  auto theta0 = to_matrix(layer_matrix(before.values[0].value,
                                       before.values[1].value));
  auto theta1 = to_matrix(layer_matrix(after.values[0].value,
                                       after.values[1].value));
  matrix change = theta1 - theta0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      double want = -double{lr} * step(i, j);
      BOOST_TEST(std::abs(change(i, j) - want)
                   <= 1e-6 + 1e-4 * std::abs(want),
                 "(" << i << ", " << j << "): " << change(i, j) << " vs "
                     << want);
    }
  // Not just the plain gradient step.
  BOOST_TEST(std::abs(change(0, 0) + lr * grad(0, 0)) > 1e-3);
}

BOOST_AUTO_TEST_CASE(one_cholesky_step_equals_the_explicit_kronecker_solve) {
  end_to_end(*this, inverse_mode::cholesky);
}

BOOST_AUTO_TEST_CASE(one_eigen_step_equals_the_explicit_damped_solve) {
  end_to_end(*this, inverse_mode::eigen);
}

BOOST_AUTO_TEST_SUITE_END()
