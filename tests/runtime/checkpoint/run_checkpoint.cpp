#define BOOST_TEST_MODULE checkpoint_run
#include <boost/test/unit_test.hpp>

// A run's checkpoint: the codec between snapshots and a checkpoint file,
// and the PS shard's and covariance actor's snapshot and restore, on real
// actors in a real actor system.

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "fixtures.hpp"

#include "actors/covariance.hpp"
#include "actors/inverse.hpp"
#include "actors/ps_shard.hpp"
#include "runtime/checkpoint/run_checkpoint.hpp"
#include "runtime/kfac/layer_inversion.hpp"
#include "actors/program_config.hpp"

using namespace syncfac;
using namespace syncfac::test;
using namespace std::chrono_literals;

namespace {

/// A dense layer "fc" (weights [2, 3], biases [3]) and a plain "scale".
parameter_set model_variables(float salt) {
  return {{"fc/weights", tensor{{2, 3}, {1, 2, 3, 4, 5, 6}}},
          {"fc/biases", tensor{{3}, {0.5f + salt, -0.5f, 0}}},
          {"scale", tensor{tensor_shape{}, {2.0f + salt}}}};
}

kfac_layer fc_layer() {
  kfac_layer l;
  l.name = "fc";
  l.weight_name = "fc/weights";
  l.bias_name = "fc/biases";
  l.a_dim = 3;
  l.g_dim = 3;
  return l;
}

/// A symmetric positive definite 3x3 matrix.
tensor spd(float d) {
  return tensor{{3, 3}, {d, 0.1f, 0, 0.1f, d, 0.2f, 0, 0.2f, d}};
}

layer_inverse fc_inverse() {
  layer_factors f;
  f.layer = "fc";
  f.cov_updates = 5;
  f.a = spd(2);
  f.g = spd(3);
  kfac_config cfg;
  bool raised = false;
  auto inv = invert_layer(f, cfg, raised);
  BOOST_REQUIRE_MESSAGE(inv, why(inv));
  return *inv;
}

ps_shard_config shard_config() {
  ps_shard_config cfg;
  cfg.variables = model_variables(0);
  cfg.optimizer = test::optimizer_of(optimizer_kind::kfac, 0.1f);
  cfg.optimizer.momentum = 0.9f;
  cfg.kfac_layers = {fc_layer()};
  return cfg;
}

run_identity identity(const std::string& model = "mlp 2->3") {
  run_identity id;
  id.model = model;
  id.optimizer = "kfac";
  id.workers = 2;
  id.averages = true;
  return id;
}

/// What a shard at step 7 with momentum and an inverse would hand over.
shard_snapshot sample_snapshot() {
  shard_snapshot s;
  s.global_step = 7;
  s.variables = model_variables(1);
  s.averages = model_variables(2);
  s.slots.step = 7;
  s.slots.first = model_variables(3);
  s.kfac_layers = {"fc"};
  s.inverses = {fc_inverse()};
  return s;
}

covariance_snapshot sample_covariance() {
  covariance_snapshot c;
  c.last_folded = 6;
  layer_factors f;
  f.layer = "fc";
  f.cov_updates = 7;
  f.a = spd(0.4f);
  f.g = spd(0.7f);
  c.layers = {f};
  c.weights = {0.3f};
  return c;
}

checkpoint_contents sample_contents() {
  checkpoint_contents c;
  c.global_step = 7;
  c.shards = {sample_snapshot()};
  c.covariance = {sample_covariance()};
  c.data_order = {{0, 6, {1, 256}}, {1, 6, {2, 128}}};
  return c;
}

/// Encodes, writes and reads back `contents` as a checkpoint of `dir`.
checkpoint written(const temp_dir& dir, const checkpoint_contents& contents,
                   const run_identity& id) {
  parameter_set tensors;
  tensor_metadata meta;
  BOOST_REQUIRE(!encode_run_checkpoint(contents, id, tensors, meta));
  checkpoint_store store{dir.path()};
  auto saved = store.save(contents.global_step, tensors, meta);
  BOOST_REQUIRE_MESSAGE(saved, why(saved));
  auto back = store.load(contents.global_step);
  BOOST_REQUIRE_MESSAGE(back, why(back));
  return *back;
}

struct actor_fixture {
  program_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};

  template <class T, class Handle, class... Ts>
  caf::expected<T> ask(const Handle& h, Ts&&... xs) {
    return test::ask<T>(self, h, std::forward<Ts>(xs)...);
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(codec)

BOOST_AUTO_TEST_CASE(a_written_checkpoint_restores_every_part_exactly) {
  temp_dir dir;
  auto ckpt = written(dir, sample_contents(), identity());
  auto run = decode_run_checkpoint(ckpt, identity());
  BOOST_REQUIRE_MESSAGE(run, why(run));
  BOOST_TEST(run->global_step == 7);
  BOOST_TEST(run->optimizer_step == 7);
  BOOST_TEST(run->written_under.workers == 2);
  // A shard template as the live shard would give it: its names, old
  // values; filling it yields the checkpoint's values.
  auto snap = sample_snapshot();
  snap.variables = model_variables(9);
  snap.averages = model_variables(9);
  snap.slots.first = model_variables(9);
  snap.slots.step = 0;
  snap.inverses.clear();
  BOOST_REQUIRE(!fill_snapshot(*run, snap));
  auto want = sample_snapshot();
  BOOST_TEST(same(snap.variables, want.variables));
  BOOST_TEST(same(snap.averages, want.averages));
  BOOST_TEST(same(snap.slots.first, want.slots.first));
  BOOST_TEST(snap.slots.step == 7);
  BOOST_REQUIRE_EQUAL(snap.inverses.size(), 1u);
  const auto& inv = snap.inverses.front();
  const auto& want_inv = want.inverses.front();
  BOOST_TEST((inv.a == want_inv.a && inv.g == want_inv.g));
  BOOST_TEST(inv.a_damping == want_inv.a_damping);
  BOOST_TEST(inv.g_damping == want_inv.g_damping);
  BOOST_TEST(static_cast<int>(inv.form) == static_cast<int>(want_inv.form));
  auto cov = sample_covariance();
  cov.layers.front().a = tensor{};
  cov.weights = {0};
  BOOST_REQUIRE(!fill_snapshot(*run, cov));
  BOOST_TEST((cov.layers.front().a == sample_covariance().layers.front().a));
  BOOST_TEST(cov.weights.front() == 0.3f);
  BOOST_TEST(cov.last_folded == 6);
  BOOST_TEST(cov.layers.front().cov_updates == 7);
}

BOOST_AUTO_TEST_CASE(tensor_names_say_what_they_are) {
  parameter_set tensors;
  tensor_metadata meta;
  BOOST_REQUIRE(!encode_run_checkpoint(sample_contents(), identity(), tensors,
                                       meta));
  std::vector<std::string> names;
  for (const auto& t : tensors)
    names.push_back(t.name);
  for (const char* want :
       {"variables/fc/weights", "averages/scale", "slots/first/fc/biases",
        "kfac/inverse/fc/a", "kfac/inverse/fc/g", "kfac/factors/fc/a"})
    BOOST_TEST((std::find(names.begin(), names.end(), want) != names.end()),
               want);
  BOOST_TEST(meta.at("format") == "syncfac-run-1");
  BOOST_TEST(meta.at("data_order").find("\"cursor\":256") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(eigenvalues_are_kept_only_where_an_inverse_has_them) {
  temp_dir dir;
  auto contents = sample_contents();
  auto& inv = contents.shards.front().inverses.front();
  inv.a_values = tensor{{2}, {0.5f, 2.0f}};
  auto run = decode_run_checkpoint(written(dir, contents, identity()),
                                   identity());
  BOOST_REQUIRE_MESSAGE(run, why(run));
  const auto& back = run->inverses.at("fc");
  BOOST_TEST((back.a_values == inv.a_values));
  BOOST_TEST(back.g_values.empty());
  parameter_set tensors;
  tensor_metadata meta;
  BOOST_REQUIRE(!encode_run_checkpoint(contents, identity(), tensors, meta));
  for (const auto& t : tensors)
    BOOST_TEST(t.name != "kfac/inverse/fc/g_values");
}

BOOST_AUTO_TEST_CASE(a_tensor_no_run_writes_is_refused_by_name) {
  temp_dir dir;
  auto ckpt = written(dir, sample_contents(), identity());
  for (const char* name : {"kfac/inverse/fc/b", "kfac/factors/fc/a_values",
                           "kfac/other/fc/a"}) {
    auto extra = ckpt;
    extra.tensors.push_back(named_tensor{name, tensor{{2}, {1.0f, 2.0f}}});
    auto run = decode_run_checkpoint(extra, identity());
    BOOST_REQUIRE(!run);
    BOOST_TEST(is_code(run.error(), ec::bad_data));
    BOOST_TEST(says(run.error(), "unknown tensor '" + std::string{name} + "'"),
               why(run));
  }
}

BOOST_AUTO_TEST_CASE(another_model_or_optimizer_is_refused_naming_both) {
  temp_dir dir;
  auto ckpt = written(dir, sample_contents(), identity("mlp 2->3"));
  auto other = decode_run_checkpoint(ckpt, identity("convnet 28x28x1->10"));
  BOOST_REQUIRE(!other);
  BOOST_TEST(is_code(other.error(), ec::invalid_config));
  BOOST_TEST(says(other.error(), "'mlp 2->3'"), why(other));
  BOOST_TEST(says(other.error(), "'convnet 28x28x1->10'"), why(other));
  auto id = identity();
  id.optimizer = "adam";
  auto opt = decode_run_checkpoint(ckpt, id);
  BOOST_REQUIRE(!opt);
  BOOST_TEST(says(opt.error(), "optimizer 'kfac'"), why(opt));
}

BOOST_AUTO_TEST_CASE(a_variable_the_checkpoint_lacks_or_shapes_otherwise) {
  temp_dir dir;
  auto run = decode_run_checkpoint(written(dir, sample_contents(), identity()),
                                   identity());
  BOOST_REQUIRE(run);
  auto snap = sample_snapshot();
  snap.variables.push_back({"extra", tensor{{2}, {1, 2}}});
  auto err = fill_snapshot(*run, snap);
  BOOST_TEST(is_code(err, ec::unknown_name));
  BOOST_TEST(says(err, "lacks the value of variable 'extra'"), render(err));
  snap = sample_snapshot();
  snap.variables.front().value = tensor{{3, 2}};
  err = fill_snapshot(*run, snap);
  BOOST_TEST(is_code(err, ec::shape_mismatch));
  BOOST_TEST(says(err, "'fc/weights' has shape [2, 3]"), render(err));
}

BOOST_AUTO_TEST_CASE(a_file_not_written_by_a_run_is_refused) {
  temp_dir dir;
  checkpoint_store store{dir.path()};
  BOOST_REQUIRE(store.save(3, model_variables(0), {{"model", "x"}}));
  auto ckpt = store.load(3);
  BOOST_REQUIRE(ckpt);
  auto run = decode_run_checkpoint(*ckpt, identity());
  BOOST_REQUIRE(!run);
  BOOST_TEST(is_code(run.error(), ec::bad_data));
  BOOST_TEST(says(run.error(), "not a syncfac training checkpoint"), why(run));
}

BOOST_AUTO_TEST_CASE(workers_resume_their_data_order_or_the_next_epoch) {
  temp_dir dir;
  auto run = decode_run_checkpoint(written(dir, sample_contents(), identity()),
                                   identity());
  BOOST_REQUIRE(run);
  auto same_count = resume_of(*run, 1, 2);
  BOOST_TEST(same_count.global_step == 7);
  BOOST_TEST(same_count.has_data_order);
  BOOST_TEST(same_count.data_order.epoch == 2);
  BOOST_TEST(same_count.data_order.cursor == 128);
  // Three workers shard the data differently: the next epoch, from 0.
  auto more = resume_of(*run, 2, 3);
  BOOST_TEST(more.has_data_order);
  BOOST_TEST(more.data_order.epoch == 3);
  BOOST_TEST(more.data_order.cursor == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(roles, actor_fixture)

BOOST_AUTO_TEST_CASE(a_shard_restores_its_snapshot_and_continues_from_it) {
  auto shard = spawn_ps_shard(sys, shard_config());
  BOOST_REQUIRE(shard);
  auto restored = sample_snapshot();
  auto ok = ask<caf::ok_atom>(*shard, restore_atom::value, restored);
  BOOST_REQUIRE_MESSAGE(ok, why(ok));
  auto snap = ask<shard_snapshot>(*shard, checkpoint_atom::value);
  BOOST_REQUIRE(snap);
  BOOST_TEST(snap->global_step == 7);
  BOOST_TEST(same(snap->variables, restored.variables));
  BOOST_TEST(same(snap->averages, restored.averages));
  BOOST_TEST(same(snap->slots.first, restored.slots.first));
  BOOST_TEST(snap->slots.step == 7);
  BOOST_REQUIRE_EQUAL(snap->inverses.size(), 1u);
  auto status = ask<shard_status>(*shard, status_atom::value);
  BOOST_REQUIRE(status);
  BOOST_TEST(status->kfac_ready == 1);
  // Its accumulators are at the restored step: a push of step 6 is stale,
  // one of step 7 counts.
  gradient_push old;
  old.local_step = 6;
  old.dense = model_variables(0);
  auto ack = ask<push_ack>(*shard, push_atom::value, old);
  BOOST_REQUIRE(ack);
  BOOST_TEST(!ack->accepted);
  old.local_step = 7;
  ack = ask<push_ack>(*shard, push_atom::value, old);
  BOOST_REQUIRE(ack);
  BOOST_TEST(ack->accepted);
  auto applied_ = ask<applied>(*shard, apply_atom::value, int64_t{7},
                               int64_t{1});
  BOOST_REQUIRE_MESSAGE(applied_, why(applied_));
  BOOST_TEST(applied_->global_step == 8);
}

BOOST_AUTO_TEST_CASE(a_snapshot_that_does_not_fit_changes_nothing) {
  auto shard = spawn_ps_shard(sys, shard_config());
  BOOST_REQUIRE(shard);
  auto before = ask<shard_snapshot>(*shard, checkpoint_atom::value);
  BOOST_REQUIRE(before);
  auto wrong = sample_snapshot();
  wrong.slots.first.back().value = tensor{{2}, {1, 2}};
  auto refused = ask<caf::ok_atom>(*shard, restore_atom::value, wrong);
  BOOST_REQUIRE(!refused);
  BOOST_TEST(says(refused.error(), "optimizer slots"), why(refused));
  wrong = sample_snapshot();
  wrong.variables.back().name = "other";
  refused = ask<caf::ok_atom>(*shard, restore_atom::value, wrong);
  BOOST_REQUIRE(!refused);
  BOOST_TEST((says(refused.error(), "lack 'scale'")
              || says(refused.error(), "'other'")),
             why(refused));
  wrong = sample_snapshot();
  wrong.inverses.front().layer = "conv9";
  refused = ask<caf::ok_atom>(*shard, restore_atom::value, wrong);
  BOOST_REQUIRE(!refused);
  BOOST_TEST(says(refused.error(), "'conv9'"), why(refused));
  auto after = ask<shard_snapshot>(*shard, checkpoint_atom::value);
  BOOST_REQUIRE(after);
  BOOST_TEST(after->global_step == before->global_step);
  BOOST_TEST(same(after->variables, before->variables));
  BOOST_TEST(same(after->slots.first, before->slots.first));
  BOOST_TEST(after->inverses.empty());
}

BOOST_AUTO_TEST_CASE(a_covariance_actor_restores_its_factors) {
  // The inverse actor the factors would go to (not reached here: one
  // fold below invert_every).
  covariance_config cc;
  cc.layers = {fc_layer()};
  cc.kfac.invert_every = 1000;
  auto dummy_inverse = caf::actor_cast<inverse_actor>(self);
  cc.inverses = {dummy_inverse};
  cc.inverse_of = {0};
  auto cov = spawn_covariance(sys, cc);
  BOOST_REQUIRE_MESSAGE(cov, why(cov));
  auto ok = ask<caf::ok_atom>(*cov, restore_atom::value, sample_covariance());
  BOOST_REQUIRE_MESSAGE(ok, why(ok));
  auto snap = ask<covariance_snapshot>(*cov, checkpoint_atom::value);
  BOOST_REQUIRE(snap);
  BOOST_TEST(snap->last_folded == 6);
  BOOST_TEST(snap->weights.front() == 0.3f);
  BOOST_TEST((snap->layers.front().a == sample_covariance().layers.front().a));
  auto status = ask<covariance_status>(*cov, status_atom::value);
  BOOST_REQUIRE(status);
  BOOST_TEST(status->cov_updates == 7);
  // Statistics of a step the checkpoint folded already are stale.
  stats_update u;
  u.step = 6;
  u.examples = 4;
  layer_stats ls;
  ls.layer = "fc";
  ls.a = spd(1);
  ls.g = spd(1);
  u.layers = {ls};
  auto ack = ask<stats_ack>(*cov, stats_atom::value, u);
  BOOST_REQUIRE_MESSAGE(ack, why(ack));
  BOOST_TEST(!ack->accepted);
  // A wrong shape is refused and changes nothing.
  auto wrong = sample_covariance();
  wrong.layers.front().g = tensor{{2, 2}};
  auto refused = ask<caf::ok_atom>(*cov, restore_atom::value, wrong);
  BOOST_REQUIRE(!refused);
  BOOST_TEST(says(refused.error(), "layer 'fc' has factors"), why(refused));
  auto again = ask<covariance_snapshot>(*cov, checkpoint_atom::value);
  BOOST_REQUIRE(again);
  BOOST_TEST((again->layers.front().g == sample_covariance().layers.front().g));
}

BOOST_AUTO_TEST_SUITE_END()
