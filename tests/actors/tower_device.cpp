#define BOOST_TEST_MODULE tower_device
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/device_actor.hpp"
#include "actors/tower_device.hpp"
#include "runtime/data/batcher.hpp"
#include "runtime/base/error.hpp"
#include "actors/program_config.hpp"
#include "tests/actor_fixture.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;
using namespace std::chrono_literals;

namespace {

/// A stand-in tower with canned answers: gradients and sparse rows that
/// say which tower sent them, inverses tagged with the tower's index, and
/// optionally no answer at all to gradient requests (a hung device).
struct mock_state {
  static inline const char* name = "mock_tower";
  std::vector<caf::typed_response_promise<step_result>> never;
};

device_actor::behavior_type
mock_tower(device_actor::stateful_pointer<mock_state> self, int32_t index,
           bool silent) {
  auto canned = [=](const batch& b) -> caf::result<step_result> {
    if (silent) {
      // Kept, so the request is neither answered nor broken.
      self->state.never.push_back(self->make_response_promise<step_result>());
      return self->state.never.back();
    }
    auto v = static_cast<float>(index + 1);
    step_result r;
    r.count = static_cast<int64_t>(b.labels.size());
    r.loss = v;
    r.gradients = {named_tensor{"w", tensor{{2}, {v, -v}}}};
    // Row 5 is in every tower's answer, row `index` only in this one's.
    r.sparse_gradients = {
      sparse_update{"emb", {index, 5}, tensor{{2, 2}, {v, v, v, v}}}};
    return r;
  };
  auto refuse = [] { return make_error(ec::unavailable, "mock tower"); };
  return {
    [=](load_model_atom, const model_spec&,
        uint64_t) -> caf::result<model_info> { return model_info{}; },
    [=](params_atom, const parameter_set&) -> caf::result<caf::ok_atom> {
      return caf::ok_atom::value;
    },
    [=](params_atom) -> caf::result<parameter_set> { return refuse(); },
    [=](optimizer_atom, const optimizer_config&) -> caf::result<caf::ok_atom> {
      return caf::ok_atom::value;
    },
    [=](grads_atom, const batch& b) -> caf::result<step_result> {
      return canned(b);
    },
    [=](grads_atom, const parameter_set&,
        const batch& b) -> caf::result<step_result> { return canned(b); },
    [=](grads_atom, const parameter_set&, const std::vector<sparse_update>&,
        const batch& b) -> caf::result<step_result> { return canned(b); },
    [=](grads_atom, const parameter_set&, const batch& b,
        const stats_request&) -> caf::result<step_result> {
      return canned(b);
    },
    [=](stats_atom, const parameter_set&, const batch&,
        const stats_request&) -> caf::result<stats_update> {
      return refuse();
    },
    [=](invert_atom, const factor_set&,
        const kfac_config&) -> caf::result<inverse_set> {
      inverse_set s;
      s.step = index;
      return s;
    },
    [=](train_atom, const batch&) -> caf::result<step_result> {
      return refuse();
    },
    [=](eval_atom, const batch&) -> caf::result<eval_result> {
      return refuse();
    },
    [=](gemm_atom, const tensor&, bool, const tensor&,
        bool) -> caf::result<tensor> { return refuse(); },
    [=](info_atom) -> caf::result<device_info> {
      return device_info{"mock", 1};
    },
  };
}

model_spec mlp_spec() {
  model_spec spec;
  spec.arch = model_arch::mlp;
  return spec;
}

std::pair<int64_t, int64_t> range(int64_t begin, int64_t end) {
  return {begin, end};
}

batch fake_batch(int64_t n) {
  static auto data = make_fake_dataset(64, 3);
  batch b;
  slice(data, 0, n, b);
  return b;
}

/// |x - y| <= tol * (|y| + max|y|) element by element: relative for the
/// large values, and for the small ones relative to the tensor's scale
/// (a near-zero gradient entry is a difference of large terms, so its own
/// magnitude is no measure of the rounding it carries).
void check_close(const tensor& x, const tensor& y, const std::string& what,
                 double tol = 1e-5) {
  BOOST_REQUIRE_MESSAGE(x.shape() == y.shape(),
                        what << ": shape " << x.shape_string() << " vs "
                             << y.shape_string());
  double scale = 0;
  for (auto v : y.values())
    scale = std::max(scale, static_cast<double>(std::abs(v)));
  double worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < y.size(); ++i) {
    auto err = std::abs(static_cast<double>(x[i]) - y[i])
               / (std::abs(static_cast<double>(y[i])) + scale);
    if (err > worst) {
      worst = err;
      at = i;
    }
  }
  BOOST_TEST(worst <= tol, what << ": worst relative error " << worst
                                << " at " << at << " (" << x[at] << " vs "
                                << y[at] << ")");
}

struct fixture : test::actor_fixture {
  device_actor device(int threads = 1) {
    return keep(spawn_device(sys, device_config{"cpu", threads}));
  }

  std::vector<device_actor> devices(int n) {
    std::vector<device_actor> result;
    for (int k = 0; k < n; ++k)
      result.push_back(device());
    return result;
  }

  device_actor towers(std::vector<device_actor> ts,
                      std::chrono::milliseconds timeout = 30s) {
    return keep(spawn_tower_device(sys, std::move(ts), timeout));
  }

  device_actor towers(int n) {
    return towers(devices(n));
  }

  device_actor mock(int32_t index, bool silent = false) {
    auto a = sys.spawn(mock_tower, index, silent);
    spawned.push_back(caf::actor_cast<caf::actor>(a));
    return a;
  }

  /// The answer to a request, or the error it produced.
  template <class T, class... Ts>
  caf::expected<T> ask(const device_actor& dev, Ts&&... xs) {
    auto pending = self->request(dev, 60s, std::forward<Ts>(xs)...);
    return test::answer<T>(pending);
  }

  model_info load(const device_actor& dev, const model_spec& spec) {
    auto info = ask<model_info>(dev, load_model_atom::value, spec,
                                uint64_t{7});
    BOOST_REQUIRE_MESSAGE(info, test::why(info));
    return *info;
  }

  step_result grads(const device_actor& dev, const parameter_set& params,
                    const batch& b) {
    auto res = ask<step_result>(dev, grads_atom::value, params, b);
    BOOST_REQUIRE_MESSAGE(res, test::why(res));
    return *res;
  }

  step_result grads(const device_actor& dev, const parameter_set& params,
                    const batch& b, const stats_request& req) {
    auto res = ask<step_result>(dev, grads_atom::value, params, b, req);
    BOOST_REQUIRE_MESSAGE(res, test::why(res));
    return *res;
  }
};

void check_same_step(const step_result& x, const step_result& y) {
  BOOST_TEST(x.count == y.count);
  BOOST_TEST(x.correct == y.correct);
  BOOST_TEST(std::abs(x.loss - y.loss) <= 1e-5 * std::abs(y.loss),
             "loss " << x.loss << " vs " << y.loss);
  BOOST_REQUIRE_EQUAL(x.gradients.size(), y.gradients.size());
  for (size_t i = 0; i < y.gradients.size(); ++i) {
    BOOST_TEST(x.gradients[i].name == y.gradients[i].name);
    check_close(x.gradients[i].value, y.gradients[i].value,
                "gradient " + y.gradients[i].name);
  }
  BOOST_TEST(x.sparse_gradients.empty());
}

void check_same_stats(const std::vector<layer_stats>& x,
                      const std::vector<layer_stats>& y) {
  BOOST_REQUIRE_EQUAL(x.size(), y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    BOOST_TEST(x[i].layer == y[i].layer);
    check_close(x[i].a, y[i].a, "A of " + y[i].layer);
    check_close(x[i].g, y[i].g, "G of " + y[i].layer);
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(splits_into_contiguous_nearly_equal_parts) {
  // 10 over 3: the first 10 mod 3 = 1 part is one larger.
  BOOST_TEST((tower::part_range(10, 3, 0) == range(0, 4)));
  BOOST_TEST((tower::part_range(10, 3, 1) == range(4, 7)));
  BOOST_TEST((tower::part_range(10, 3, 2) == range(7, 10)));
  // More parts than examples: the last parts are empty.
  BOOST_TEST((tower::part_range(2, 4, 1) == range(1, 2)));
  BOOST_TEST((tower::part_range(2, 4, 3) == range(2, 2)));
  auto b = fake_batch(10);
  auto part = tower::batch_range(b, 4, 7);
  BOOST_TEST(part.images.shape() == (tensor_shape{3, 28, 28, 1}));
  BOOST_TEST(part.labels == label_vector(b.labels.begin() + 4,
                                         b.labels.begin() + 7));
  BOOST_TEST(part.images[0] == b.images[4 * 28 * 28]);
}

BOOST_FIXTURE_TEST_SUITE(tower_device_tests, fixture)

BOOST_AUTO_TEST_CASE(refuses_no_towers_and_bad_timeouts) {
  auto none = spawn_tower_device(sys, {}, 1s);
  BOOST_REQUIRE(!none);
  BOOST_TEST(render(none.error()).find("at least one tower")
             != std::string::npos, render(none.error()));
  auto timeout = spawn_tower_device(sys, devices(1), 0ms);
  BOOST_REQUIRE(!timeout);
  BOOST_TEST(render(timeout.error()).find("timeout") != std::string::npos);
  auto invalid = spawn_tower_device(sys, {device(), device_actor{}}, 1s);
  BOOST_REQUIRE(!invalid);
  BOOST_TEST(render(invalid.error()).find("tower 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(gradients_match_a_single_device) {
  for (auto spec : {model_spec{}, mlp_spec()}) {
    auto single = device();
    auto info = load(single, spec);
    auto b = fake_batch(10);
    auto want = grads(single, info.initial, b);
    for (int n : {1, 2, 3}) {
      BOOST_TEST_CONTEXT(to_string(spec.arch) << ", " << n << " towers") {
        auto dev = towers(n);
        auto tinfo = load(dev, spec);
        BOOST_TEST(tinfo.parameter_count == info.parameter_count);
        // (params, batch) and (batch) at the loaded parameters.
        check_same_step(grads(dev, info.initial, b), want);
        auto plain = ask<step_result>(dev, grads_atom::value, b);
        BOOST_REQUIRE_MESSAGE(plain, test::why(plain));
        check_same_step(*plain, want);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(empirical_fisher_statistics_match_a_single_device) {
  // A is an average over examples (and conv locations), so the towers'
  // averages weighted by their examples are the batch's. G is too, because
  // each tower's per-example gradient is n_k · ds_k of ITS OWN mean loss,
  // which is the same per-example gradient the single device gets as
  // B · ds of the batch mean: the weighted average is exact, not an
  // approximation (kernels/cpu/kfac_factors.hpp conventions).
  stats_request req;
  req.fisher = fisher_type::empirical;
  for (auto spec : {model_spec{}, mlp_spec()}) {
    auto single = device();
    auto info = load(single, spec);
    auto b = fake_batch(10);
    auto want = grads(single, info.initial, b, req);
    BOOST_TEST(want.stats_examples == 10);
    auto want_only = ask<stats_update>(single, stats_atom::value,
                                       info.initial, b, req);
    BOOST_REQUIRE_MESSAGE(want_only, test::why(want_only));
    for (int n : {1, 2, 3}) {
      BOOST_TEST_CONTEXT(to_string(spec.arch) << ", " << n << " towers") {
        auto dev = towers(n);
        load(dev, spec);
        auto got = grads(dev, info.initial, b, req);
        check_same_step(got, want);
        BOOST_TEST(got.stats_examples == 10);
        check_same_stats(got.stats, want.stats);
        auto only = ask<stats_update>(dev, stats_atom::value, info.initial,
                                      b, req);
        BOOST_REQUIRE_MESSAGE(only, test::why(only));
        BOOST_TEST(only->examples == 10);
        check_same_stats(only->layers, want_only->layers);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sub_sampled_statistics_are_shared_across_towers) {
  // 4 of 10 examples over 3 towers: 2, 1 and 1 of their parts' first
  // examples; still 4 in all, and every tower did some of the work.
  stats_request req;
  req.fisher = fisher_type::empirical;
  req.sampling.max_examples = 4;
  auto dev = towers(3);
  auto info = load(dev, model_spec{});
  auto b = fake_batch(10);
  auto got = grads(dev, info.initial, b, req);
  BOOST_TEST(got.count == 10);
  BOOST_TEST(got.stats_examples == 4);
  BOOST_TEST(got.stats.size() == 3u);
  // 2 of 10 over 3 towers: the third computes gradients only.
  req.sampling.max_examples = 2;
  got = grads(dev, info.initial, b, req);
  BOOST_TEST(got.count == 10);
  BOOST_TEST(got.stats_examples == 2);
  auto only = ask<stats_update>(dev, stats_atom::value, info.initial, b, req);
  BOOST_REQUIRE_MESSAGE(only, test::why(only));
  BOOST_TEST(only->examples == 2);
  BOOST_TEST(only->layers.size() == 3u);
}

BOOST_AUTO_TEST_CASE(more_towers_than_examples_skip_the_empty_ones) {
  auto single = device();
  auto info = load(single, model_spec{});
  auto b = fake_batch(3);
  auto want = grads(single, info.initial, b);
  auto dev = towers(5);
  load(dev, model_spec{});
  check_same_step(grads(dev, info.initial, b), want);
  auto eval = ask<eval_result>(dev, eval_atom::value, b);
  BOOST_REQUIRE_MESSAGE(eval, test::why(eval));
  BOOST_TEST(eval->count == 3);
}

BOOST_AUTO_TEST_CASE(evaluation_matches_a_single_device) {
  auto single = device();
  load(single, model_spec{});
  auto b = fake_batch(10);
  auto want = ask<eval_result>(single, eval_atom::value, b);
  BOOST_REQUIRE(want);
  auto dev = towers(3);
  load(dev, model_spec{});
  auto got = ask<eval_result>(dev, eval_atom::value, b);
  BOOST_REQUIRE_MESSAGE(got, test::why(got));
  BOOST_TEST(got->count == want->count);
  BOOST_TEST(got->correct == want->correct);
  BOOST_TEST(std::abs(got->loss_sum - want->loss_sum)
               <= 1e-5 * std::abs(want->loss_sum),
             got->loss_sum << " vs " << want->loss_sum);
}

BOOST_AUTO_TEST_CASE(a_failing_tower_is_named) {
  auto ts = devices(3);
  auto dev = towers(ts);
  auto info = load(dev, model_spec{});
  // Tower 1 alone holds an MLP: the ConvNet's parameters do not fit it.
  load(ts[1], mlp_spec());
  auto res = ask<caf::ok_atom>(dev, params_atom::value, info.initial);
  BOOST_REQUIRE(!res);
  auto text = render(res.error());
  BOOST_TEST(text.find("tower 1 of 3") != std::string::npos, text);
  BOOST_TEST(text.find("params") != std::string::npos, text);
  auto g = ask<step_result>(dev, grads_atom::value, info.initial,
                            fake_batch(10));
  BOOST_REQUIRE(!g);
  text = render(g.error());
  BOOST_TEST(text.find("tower 1 of 3 (grads)") != std::string::npos, text);
  // A malformed batch is refused before anything is sent.
  auto bad = fake_batch(10);
  bad.labels.pop_back();
  auto e = ask<eval_result>(dev, eval_atom::value, bad);
  BOOST_REQUIRE(!e);
  BOOST_TEST(render(e.error()).find("9 labels") != std::string::npos,
             render(e.error()));
}

BOOST_AUTO_TEST_CASE(replicas_that_differ_are_refused_at_load) {
  // Not reachable with real devices (same seed, same values), so through
  // a mock whose model_info is empty next to a real device's.
  auto dev = towers({device(), mock(1)});
  auto res = ask<model_info>(dev, load_model_atom::value, model_spec{},
                             uint64_t{7});
  BOOST_REQUIRE(!res);
  BOOST_TEST(render(res.error()).find("tower 1 of 2") != std::string::npos,
             render(res.error()));
}

BOOST_AUTO_TEST_CASE(a_hung_tower_times_out_by_name) {
  auto dev = towers({mock(0), mock(1, true)}, 200ms);
  auto res = ask<step_result>(dev, grads_atom::value, fake_batch(4));
  BOOST_REQUIRE(!res);
  auto text = render(res.error());
  BOOST_TEST(text.find("tower 1 of 2 (grads)") != std::string::npos, text);
  BOOST_TEST(text.find("no answer within 200 ms") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(sparse_gradients_merge_rows_by_index) {
  // 10 examples over 2 mocks: weights 1/2 each; tower k sends rows k and
  // 5 with values k + 1, so row 5 is 0.5 * 1 + 0.5 * 2.
  auto dev = towers({mock(0), mock(1)});
  auto res = ask<step_result>(dev, grads_atom::value, fake_batch(10));
  BOOST_REQUIRE_MESSAGE(res, test::why(res));
  BOOST_TEST(res->loss == 1.5f);
  BOOST_REQUIRE_EQUAL(res->gradients.size(), 1u);
  BOOST_TEST(res->gradients[0].value == (tensor{{2}, {1.5f, -1.5f}}));
  BOOST_REQUIRE_EQUAL(res->sparse_gradients.size(), 1u);
  const auto& s = res->sparse_gradients[0];
  BOOST_TEST(s.variable == "emb");
  BOOST_TEST(s.indices == (std::vector<int64_t>{0, 1, 5}));
  BOOST_TEST(s.rows == (tensor{{3, 2}, {0.5f, 0.5f, 1, 1, 1.5f, 1.5f}}));
}

BOOST_AUTO_TEST_CASE(inversions_go_round_robin) {
  auto dev = towers({mock(0), mock(1), mock(2)});
  std::vector<int64_t> served;
  for (int i = 0; i < 4; ++i) {
    auto res = ask<inverse_set>(dev, invert_atom::value, factor_set{},
                                kfac_config{});
    BOOST_REQUIRE_MESSAGE(res, test::why(res));
    served.push_back(res->step);
  }
  BOOST_TEST(served == (std::vector<int64_t>{0, 1, 2, 0}));
}

BOOST_AUTO_TEST_CASE(describes_itself_and_serves_tower_0) {
  auto dev = towers({device(2), device(1)});
  auto info = ask<device_info>(dev, info_atom::value);
  BOOST_REQUIRE_MESSAGE(info, test::why(info));
  BOOST_TEST(info->backend == "towers(2 x cpu)");
  BOOST_TEST(info->threads == 3);
  auto loaded = load(dev, mlp_spec());
  auto params = ask<parameter_set>(dev, params_atom::value);
  BOOST_REQUIRE(params);
  BOOST_TEST(params->size() == loaded.initial.size());
  BOOST_TEST((*params)[0].value == loaded.initial[0].value);
  tensor a{{2, 3}, {1, 2, 3, 4, 5, 6}};
  tensor b{{2, 2}, {1, 0, 0, 1}};
  auto c = ask<tensor>(dev, gemm_atom::value, a, true, b, false);
  BOOST_REQUIRE_MESSAGE(c, test::why(c));
  BOOST_TEST(c->shape() == (tensor_shape{3, 2}));
  // train would desynchronise the replicas: refused, saying why.
  optimizer_config opt;
  opt.kind = optimizer_kind::sgd;
  BOOST_REQUIRE(ask<caf::ok_atom>(dev, optimizer_atom::value, opt));
  auto train = ask<step_result>(dev, train_atom::value, fake_batch(4));
  BOOST_REQUIRE(!train);
  BOOST_TEST(render(train.error()).find("sync runtime") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
