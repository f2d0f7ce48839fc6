#define BOOST_TEST_MODULE serialization
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/stream_deserializer.hpp>
#include <caf/stream_serializer.hpp>
#include <caf/streambuf.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "actors/metrics_sink.hpp"
#include "messages/device_messages.hpp"
#include "messages/kfac_messages.hpp"
#include "messages/sync_messages.hpp"
#include "messages/push_parts.hpp"
#include "runtime/base/error.hpp"
#include "runtime/optimizer.hpp"
#include "actors/program_config.hpp"
#include "tests/helpers.hpp"
#include "tests/wire_fixture.hpp"

using namespace syncfac;

namespace {

using fixture = test::wire_fixture;

tensor ramp(tensor_shape shape) {
  tensor t{std::move(shape)};
  for (int64_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return t;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(serialization_tests, fixture)

BOOST_AUTO_TEST_CASE(tensors_travel_as_one_raw_block) {
  auto t = ramp({64, 1024});
  auto buf = save(t);
  // Shape (a length prefix and 2 int64) plus exactly 4 bytes per value.
  BOOST_TEST(buf.size() >= 64u * 1024u * 4u);
  BOOST_TEST(buf.size() <= 64u * 1024u * 4u + 32u);
  BOOST_TEST(round_trip(t) == t);
  BOOST_TEST(round_trip(tensor{}) == tensor{});
  BOOST_TEST(round_trip(tensor{0, 5}) == (tensor{0, 5}));
}

BOOST_AUTO_TEST_CASE(truncated_or_hostile_tensors_are_refused) {
  auto buf = save(ramp({10, 10}));
  buf.resize(buf.size() - 7);
  tensor y;
  caf::binary_deserializer source{sys, buf};
  BOOST_TEST(source(y));
  // A shape claiming 2^40 values must not be allocated.
  auto huge = save(tensor_shape{int64_t{1} << 20, int64_t{1} << 20});
  caf::binary_deserializer hostile{sys, huge};
  auto err = load_tensor(hostile, y);
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find("larger than") != std::string::npos);
  auto negative = save(tensor_shape{4, -2});
  caf::binary_deserializer neg{sys, negative};
  BOOST_TEST(load_tensor(neg, y));
}

// load_tensor builds the values straight from the message's bytes, which
// sit at any offset in a BASP payload: every alignment must read the same.
BOOST_AUTO_TEST_CASE(tensors_load_at_every_byte_alignment) {
  auto t = ramp({3, 37});
  auto block = save(t);
  for (size_t offset = 0; offset < 8; ++offset) {
    std::vector<char> buf(offset, '\x7f');
    buf.insert(buf.end(), block.begin(), block.end());
    caf::binary_deserializer source{sys, buf};
    source.skip(offset);
    tensor y;
    auto err = load_tensor(source, y);
    BOOST_REQUIRE_MESSAGE(!err, render(err));
    BOOST_TEST(y == t, "offset " << offset);
    BOOST_TEST(source.remaining() == 0u);
  }
}

// A block cut anywhere inside its values, or a count that agrees with the
// shape but not with the bytes that follow, is refused with a message
// naming both, before anything of the claimed size is allocated.
BOOST_AUTO_TEST_CASE(truncated_value_blocks_are_refused_before_allocating) {
  auto block = save(ramp({4, 25}));
  auto values_at = block.size() - 100 * sizeof(float);
  for (auto cut : {values_at, values_at + 1, values_at + 203,
                   block.size() - 1}) {
    std::vector<char> buf(block.begin(), block.begin() + cut);
    caf::binary_deserializer source{sys, buf};
    tensor y;
    auto err = load_tensor(source, y);
    BOOST_REQUIRE_MESSAGE(err, "cut at " << cut);
    BOOST_TEST(render(err).find("claims 100 values") != std::string::npos,
               render(err));
    BOOST_TEST(y.empty());
  }
  // 2^30 values (4 GiB) claimed by a 30-byte message.
  std::vector<char> claim;
  {
    caf::binary_serializer sink{sys, claim};
    tensor_shape shape{int64_t{1} << 30};
    size_t count = size_t{1} << 30;
    BOOST_REQUIRE(!sink(shape));
    BOOST_REQUIRE(!sink.begin_sequence(count));
  }
  caf::binary_deserializer source{sys, claim};
  tensor y;
  auto err = load_tensor(source, y);
  BOOST_REQUIRE(err);
  BOOST_TEST(render(err).find("holds only 0 more bytes") != std::string::npos,
             render(err));
}

// Deserializers other than CAF's binary one (none in the runtime today)
// read into a zero-filled vector instead.
BOOST_AUTO_TEST_CASE(tensors_round_trip_through_stream_serializers) {
  auto t = ramp({2, 9});
  std::vector<char> buf;
  {
    caf::vectorbuf out{buf};
    caf::stream_serializer<caf::vectorbuf&> sink{sys, out};
    BOOST_REQUIRE(!save_tensor(sink, t));
  }
  caf::charbuf in{buf.data(), buf.size()};
  caf::stream_deserializer<caf::charbuf&> source{sys, in};
  tensor y;
  auto err = load_tensor(source, y);
  BOOST_REQUIRE_MESSAGE(!err, render(err));
  BOOST_TEST(y == t);
}

BOOST_AUTO_TEST_CASE(every_device_message_round_trips) {
  batch b;
  b.images = ramp({2, 3, 3, 1});
  b.labels = {4, 9};
  auto b2 = message_round_trip(b);
  BOOST_TEST(b2.images == b.images);
  BOOST_TEST(b2.labels == b.labels);

  parameter_set ps{{"conv0/kernel", ramp({5, 5, 1, 16})},
                   {"conv0/bias", ramp({16})}};
  auto ps2 = message_round_trip(ps);
  BOOST_REQUIRE_EQUAL(ps2.size(), 2u);
  BOOST_TEST(ps2[0].name == "conv0/kernel");
  BOOST_TEST(ps2[1].value == ps[1].value);

  model_spec spec;
  spec.arch = model_arch::mlp;
  spec.init = init_scheme::he;
  spec.hidden = {3, 4};
  spec.hidden_activation = activation::sigmoid;
  auto spec2 = message_round_trip(spec);
  BOOST_TEST(spec2.arch == model_arch::mlp);
  BOOST_TEST(spec2.init == init_scheme::he);
  BOOST_TEST(spec2.hidden == spec.hidden);
  BOOST_TEST(spec2.hidden_activation == activation::sigmoid);

  auto info2 = message_round_trip(model_info{"convnet", 14682, ps});
  BOOST_TEST(info2.summary == "convnet");
  BOOST_TEST(info2.parameter_count == 14682);
  BOOST_TEST(info2.initial[0].value == ps[0].value);

  optimizer_config opt;
  opt.kind = optimizer_kind::adam;
  opt.learning_rate = 0.125f;
  auto opt2 = message_round_trip(opt);
  BOOST_TEST(opt2.kind == optimizer_kind::adam);
  BOOST_TEST(opt2.learning_rate == 0.125f);

  optimizer_slots slots{3, ps, {}};
  auto slots2 = message_round_trip(slots);
  BOOST_TEST(slots2.step == 3);
  BOOST_TEST(slots2.first[0].value == ps[0].value);

  auto step2 = message_round_trip(step_result{1.5f, 3, 4, ps, {}, 0, {}, 0});
  BOOST_TEST(step2.loss == 1.5f);
  BOOST_TEST(step2.correct == 3);
  BOOST_TEST(step2.gradients[1].value == ps[1].value);

  auto eval2 = message_round_trip(eval_result{2.5, 7, 9});
  BOOST_TEST(eval2.loss_sum == 2.5);
  BOOST_TEST(eval2.count == 9);

  auto dev2 = message_round_trip(device_info{"cpu", 2});
  BOOST_TEST(dev2.backend == "cpu");
  BOOST_TEST(dev2.threads == 2);
}

BOOST_AUTO_TEST_CASE(errors_round_trip_and_render) {
  auto err = make_error(ec::shape_mismatch, "dense: [2, 3] vs [4, 5]");
  auto err2 = round_trip(err);
  BOOST_TEST(err2 == ec::shape_mismatch);
  BOOST_TEST(render(err2) == "shape_mismatch: dense: [2, 3] vs [4, 5]");
  BOOST_TEST(sys.render(err2).find("[4, 5]") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(sync_message_tests, fixture)

BOOST_AUTO_TEST_CASE(every_sync_message_round_trips) {
  parameter_set ps{{"v0", ramp({3})}, {"v1", ramp({2, 2})}};
  sparse_update rows{"emb", {1, 4}, ramp({2, 3})};

  auto push = message_round_trip(gradient_push{2, 17, ps, {rows}, 0, 1, {}});
  BOOST_TEST(push.worker == 2);
  BOOST_TEST(push.local_step == 17);
  BOOST_TEST(push.dense[1].value == ps[1].value);
  BOOST_TEST(push.sparse.at(0).indices == rows.indices);
  BOOST_TEST(push.sparse.at(0).rows == rows.rows);

  auto su = message_round_trip(rows);
  BOOST_TEST(su.variable == "emb");

  auto ack = message_round_trip(push_ack{true, 9});
  BOOST_TEST(ack.accepted);
  BOOST_TEST(ack.global_step == 9);

  auto sp = message_round_trip(shard_params{1, 5, ps});
  BOOST_TEST(sp.shard == 1);
  BOOST_TEST(sp.values[0].value == ps[0].value);

  auto ap = message_round_trip(applied{1, 6, 3});
  BOOST_TEST(ap.global_step == 6);
  BOOST_TEST(ap.gradients == 3);

  auto tg = message_round_trip(token_grant{12, true});
  BOOST_TEST(tg.global_step == 12);
  BOOST_TEST(tg.stop);

  auto rep = message_round_trip(worker_report{3, 4, 0.5f, 60, 64, 1, {}, 2});
  BOOST_TEST(rep.loss == 0.5f);
  BOOST_TEST(rep.stale_shards == 1);
  BOOST_TEST(rep.incarnation == 2);

  accumulator_stats acc{"v0", 5, 2, 1, 7};
  auto ss = message_round_trip(shard_status{0, 7, 5, 2, 1, {acc}});
  BOOST_TEST(ss.stale_pushes == 2);
  BOOST_TEST((ss.variables.at(0) == acc));

  auto ws = message_round_trip(worker_status{1, 8, 9, 2, 1.5, 0.25, 0, 0, 0, 0, 0, {}, 1, 1});
  BOOST_TEST(ws.token_wait_s == 0.25);
  BOOST_TEST(ws.rebinds == 1);

  auto cs = message_round_trip(chief_status{8, 2, 1, 30, true, 3, "ps:1", 7});
  BOOST_TEST(cs.refused_reports == 3);
  BOOST_TEST(cs.tokens_granted == 30);
  BOOST_TEST(cs.finished);
  BOOST_TEST(cs.lost_task == "ps:1");
  BOOST_TEST(cs.lost_at == 7);

  sync_summary sum;
  sum.global_step = 100;
  sum.examples = 12800;
  sum.stale_pushes = 4;
  sum.shards = {ss};
  auto sum2 = message_round_trip(sum);
  BOOST_TEST(sum2.examples == 12800);
  BOOST_TEST((sum2.shards.at(0).variables.at(0) == acc));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(kfac_message_tests, fixture)

BOOST_AUTO_TEST_CASE(every_kfac_message_round_trips) {
  stats_request req{fisher_type::empirical, {16, 4, 99}};
  auto req2 = message_round_trip(req);
  BOOST_TEST((req2.fisher == fisher_type::empirical));
  BOOST_TEST(req2.sampling.max_examples == 16);
  BOOST_TEST(req2.sampling.max_locations == 4);
  BOOST_TEST(req2.sampling.seed == 99u);
  BOOST_TEST(!req2.rows);
  req.rows = true;
  BOOST_TEST(message_round_trip(req).rows);

  layer_stats ls{"fc", {}, ramp({2, 2}), {ramp({2, 3}), 0.125}, {}};
  auto upd = message_round_trip(stats_update{1, 42, 16, {ls}});
  BOOST_TEST(upd.worker == 1);
  BOOST_TEST(upd.step == 42);
  BOOST_TEST(upd.examples == 16);
  BOOST_TEST(upd.layers.at(0).layer == "fc");
  BOOST_TEST(upd.layers.at(0).a == ls.a);
  BOOST_TEST(upd.layers.at(0).g == ls.g);
  BOOST_TEST(upd.layers.at(0).a_rows.x == ls.a_rows.x);
  BOOST_TEST(upd.layers.at(0).a_rows.scale == 0.125);
  BOOST_TEST(upd.layers.at(0).g_rows.x.empty());

  auto ack = message_round_trip(stats_ack{true, 7});
  BOOST_TEST(ack.accepted);
  BOOST_TEST(ack.cov_updates == 7);

  auto fs = message_round_trip(
    factor_set{40, {layer_factors{"conv", 196, 12, ramp({3, 3}), ramp({2, 2})}}});
  BOOST_TEST(fs.step == 40);
  BOOST_TEST(fs.layers.at(0).locations == 196);
  BOOST_TEST(fs.layers.at(0).cov_updates == 12);
  BOOST_TEST(fs.layers.at(0).a == ramp({3, 3}));

  layer_inverse inv;
  inv.layer = "conv";
  inv.mode = inverse_mode::eigen;
  inv.locations = 196;
  inv.damping = 1e-3f;
  inv.a_damping = 0.25f;
  inv.g_damping = 0.5f;
  inv.a = ramp({3, 3});
  inv.g = ramp({2, 2});
  inv.a_values = ramp({3});
  inv.g_values = ramp({2});
  inv.form = inverse_form::cholesky_factor;
  auto is = message_round_trip(inverse_set{40, {inv}, {"fc: too early"}, 1});
  BOOST_TEST(is.step == 40);
  BOOST_TEST(is.damping_raised == 1);
  BOOST_TEST(is.problems.at(0) == "fc: too early");
  const auto& inv2 = is.layers.at(0);
  BOOST_TEST((inv2.mode == inverse_mode::eigen));
  BOOST_TEST((inv2.form == inverse_form::cholesky_factor));
  BOOST_TEST(inv2.locations == 196);
  BOOST_TEST(inv2.g_damping == 0.5f);
  BOOST_TEST(inv2.a_values == inv.a_values);
  BOOST_TEST(inv2.g == inv.g);

  kfac_config kc;
  kc.momentum = kfac_momentum::regular;
  kc.invert_every = 5;
  auto kc2 = message_round_trip(kc);
  BOOST_TEST((kc2.momentum == kfac_momentum::regular));
  BOOST_TEST(kc2.invert_every == 5);

  layer_collection lc{{kfac_layer{"fc", layer_kind::dense, "fc/weights",
                                  "fc/bias", 785, 10, 1}},
                      predictive_distribution::bernoulli};
  auto lc2 = message_round_trip(lc);
  BOOST_TEST(lc2.layers.at(0).a_dim == 785);
  BOOST_TEST(lc2.layers.at(0).weight_name == "fc/weights");
  BOOST_TEST((lc2.distribution == predictive_distribution::bernoulli));

  covariance_status cs;
  cs.index = 1;
  cs.cov_updates = 9;
  cs.last_error = "x";
  auto cs2 = message_round_trip(cs);
  BOOST_TEST(cs2.cov_updates == 9);
  BOOST_TEST(cs2.last_error == "x");

  inverse_status ist;
  ist.inversions = 4;
  ist.invert_s = 0.5;
  auto ist2 = message_round_trip(ist);
  BOOST_TEST(ist2.inversions == 4);
  BOOST_TEST(ist2.invert_s == 0.5);

  step_result res{1.0f, 1, 2, {}, {}, 0.1, {ls}, 16};
  auto res2 = message_round_trip(res);
  BOOST_TEST(res2.stats.at(0).a == ls.a);
  BOOST_TEST(res2.stats_examples == 16);
}

BOOST_AUTO_TEST_CASE(metrics_records_round_trip) {
  metrics_record rec;
  rec.source = "evaluator:0";
  rec.step = 40;
  rec.fields["test_accuracy"] = 0.8125;
  rec.fields["test_loss"] = 0.5;
  auto rec2 = message_round_trip(rec);
  BOOST_TEST(rec2.source == "evaluator:0");
  BOOST_TEST(rec2.step == 40);
  BOOST_TEST(rec2.fields == rec.fields);
}

BOOST_AUTO_TEST_CASE(non_finite_scalars_cross_the_wire_unchanged) {
  // CAF 0.17 would loop forever on Inf and turn NaN into a finite number:
  // a diverged loss must arrive as what it is, or no check can see it.
  auto inf = std::numeric_limits<float>::infinity();
  worker_report rep;
  rep.loss = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(std::isnan(message_round_trip(rep).loss));
  rep.loss = -inf;
  BOOST_TEST(message_round_trip(rep).loss == -inf);
  rep.loss = 1.5f;
  BOOST_TEST(message_round_trip(rep).loss == 1.5f);
  eval_result res;
  res.loss_sum = std::numeric_limits<double>::infinity();
  res.sq_error_sum = std::numeric_limits<double>::quiet_NaN();
  auto res2 = message_round_trip(res);
  BOOST_TEST(std::isinf(res2.loss_sum));
  BOOST_TEST(std::isnan(res2.sq_error_sum));
  metrics_record rec;
  rec.fields["test_loss"] = std::numeric_limits<double>::infinity();
  rec.fields["test_accuracy"] = std::numeric_limits<double>::quiet_NaN();
  auto rec2 = message_round_trip(rec);
  BOOST_TEST(std::isinf(rec2.fields.at("test_loss")));
  BOOST_TEST(std::isnan(rec2.fields.at("test_accuracy")));
  sync_summary sum;
  sum.last_loss = std::numeric_limits<double>::quiet_NaN();
  BOOST_TEST(std::isnan(message_round_trip(sum).last_loss));
}

BOOST_AUTO_TEST_CASE(split_pushes_assemble_after_the_wire) {
  // The sender's slices view the gradient; on the wire they are ordinary
  // 1-D tensors, and the receiver's assembly gives the gradient back.
  gradient_push push;
  push.worker = 1;
  push.local_step = 3;
  push.dense = {{"w", ramp({50, 40})}, {"b", ramp({40})}};
  auto want = push.dense;
  auto parts = split_push(std::move(push), 1024);
  BOOST_REQUIRE_GT(parts.size(), 2u);
  static const tensor_shape w_shape{50, 40};
  push_assembler assembler{[](const std::string& name) -> const tensor_shape* {
    return name == "w" ? &w_shape : nullptr;
  }};
  std::optional<gradient_push> whole;
  for (auto& part : parts) {
    auto got = assembler.add(message_round_trip(part));
    BOOST_REQUIRE_MESSAGE(got, test::why(got));
    if (got->has_value())
      whole = std::move(**got);
  }
  BOOST_REQUIRE(whole);
  // "b" came whole; "w" stays in its slices, which hold its values.
  BOOST_REQUIRE_EQUAL(whole->dense.size(), 1u);
  BOOST_TEST(whole->dense[0].name == "b");
  BOOST_TEST((whole->dense[0].value == want[1].value));
  auto pieces = pieces_by_variable(*whole);
  BOOST_REQUIRE_EQUAL(pieces.size(), 1u);
  tensor w{w_shape};
  for (const auto& p : pieces["w"])
    std::copy(p.values, p.values + p.count, w.data() + p.offset);
  BOOST_TEST((w == want[0].value));
}

BOOST_AUTO_TEST_SUITE_END()
