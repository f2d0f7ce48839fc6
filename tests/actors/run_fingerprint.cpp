#define BOOST_TEST_MODULE actors_run_fingerprint
#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>

#include "actors/node.hpp"
#include "actors/run_fingerprint.hpp"
#include "runtime/data/content_digest.hpp"
#include "runtime/data/dataset.hpp"

using namespace syncfac;

// What a node's record holds, and which field two runs' records differ in
// first: one case per kind of setting the chief compares at hello.

namespace {

struct run {
  sync_training_config sync;
  std::unique_ptr<model> init;
  shard_layout layout;
  dataset train = make_fake_dataset(128, 1);
  dataset test = make_fake_dataset(32, 2);

  run() {
    sync.base.batch_size = 32;
    sync.ps_tasks = 2;
  }

  config_fingerprint fingerprint(bool with_data = true) {
    auto m = model::make(sync.base.model, sync.base.seed);
    BOOST_REQUIRE(m);
    init = std::move(*m);
    auto l = layout_shards(sync, *init);
    BOOST_REQUIRE(l);
    layout = std::move(*l);
    return with_data ? make_run_fingerprint(sync, *init, layout, &train, &test)
                     : make_run_fingerprint(sync, *init, layout, nullptr,
                                            nullptr);
  }
};

/// The first difference of `node`'s record from the chief's, described.
/// The chief's run and another node's, alike until a test changes one.
struct chief_and_node {
  run chief;
  run node;
};

/// The path of the first field where `a` differs from `b`, which it must.
std::string differing_path(const config_fingerprint& a,
                           const config_fingerprint& b) {
  auto d = compare_fingerprints(a, b);
  BOOST_REQUIRE_MESSAGE(d, "the fingerprints do not differ");
  return d->path;
}

std::string difference(run& node, run& chief) {
  auto d = compare_fingerprints(node.fingerprint(), chief.fingerprint());
  return d ? describe_difference("worker:1", *d) : "none";
}

} // namespace

BOOST_AUTO_TEST_CASE(two_nodes_of_one_run_agree) {
  run a;
  run b;
  BOOST_TEST(difference(a, b) == "none");
}

BOOST_AUTO_TEST_CASE(the_record_lists_every_variable_and_its_shard) {
  run a;
  auto fp = a.fingerprint();
  const auto& params = a.init->parameters();
  BOOST_REQUIRE(!params.empty());
  BOOST_TEST(*fp.value_of("model.variables.count")
             == std::to_string(params.size()));
  BOOST_TEST(*fp.value_of("model.variables[0].name") == params[0].name);
  BOOST_TEST(*fp.value_of("model.variables[0].shape")
             == fingerprint_value(params[0].value.shape()));
  BOOST_TEST(fp.value_of("ps.shards[1].variables").has_value());
  BOOST_TEST(!fp.value_of("ps.shards[2].variables").has_value());
  BOOST_TEST(*fp.value_of("data.train.count") == "128");
  BOOST_TEST(*fp.value_of("data.train.source") == "fake");
}

BOOST_FIXTURE_TEST_CASE(another_model_is_named, chief_and_node) {
  node.sync.base.model.arch = model_arch::mlp;
  BOOST_TEST(difference(node, chief)
             == "worker:1 differs from the chief in model.arch: mlp on "
                "worker:1, convnet on the chief");
}

BOOST_FIXTURE_TEST_CASE(another_variable_shape_is_named, chief_and_node) {
  chief.sync.base.model.arch = model_arch::mlp;
  node.sync.base.model.arch = model_arch::mlp;
  node.sync.base.model.hidden = {128, 64, 16};
  BOOST_TEST(differing_path(node.fingerprint(), chief.fingerprint())
             == "model.hidden");
  // The variables say it too, field by field.
  auto a = node.fingerprint();
  auto b = chief.fingerprint();
  b.add("model.hidden", *a.value_of("model.hidden"));
  auto d = compare_fingerprints(a, b);
  BOOST_REQUIRE(d);
  BOOST_TEST(d->path.rfind("model.variables[", 0) == 0, d->path);
  BOOST_TEST(d->first.find("16") != std::string::npos, d->first);
}

BOOST_FIXTURE_TEST_CASE(the_averaged_variables_are_named, chief_and_node) {
  chief.sync.moving_average_decay = node.sync.moving_average_decay = 0.99f;
  node.sync.variables_to_average = {"fc4", "conv2/kernel"};
  BOOST_TEST(difference(node, chief)
             == "worker:1 differs from the chief in run.variables_to_average: "
                "[fc4,conv2/kernel] on worker:1, all on the chief");
}

BOOST_FIXTURE_TEST_CASE(an_optimizer_hyperparameter_is_named, chief_and_node) {
  node.sync.base.optimizer.learning_rate = 0.02f;
  BOOST_TEST(difference(node, chief)
             == "worker:1 differs from the chief in optimizer.learning_rate: "
                "0.02 on worker:1, 0.01 on the chief");
}

BOOST_FIXTURE_TEST_CASE(kfac_settings_count_only_under_kfac, chief_and_node) {
  node.sync.base.optimizer.kfac.damping = 0.01f;
  BOOST_TEST(difference(node, chief) == "none");
  chief.sync.base.optimizer.kind = optimizer_kind::kfac;
  node.sync.base.optimizer.kind = optimizer_kind::kfac;
  BOOST_TEST(difference(node, chief)
             == "worker:1 differs from the chief in optimizer.kfac.damping: "
                "0.01 on worker:1, 0.001 on the chief");
  node.sync.base.optimizer.kfac.damping = 0.001f;
  node.sync.base.optimizer.kfac.cadence = kfac_cadence::exact;
  BOOST_TEST(difference(node, chief)
             == "worker:1 differs from the chief in optimizer.kfac.cadence: "
                "exact on worker:1, counted on the chief");
  node.sync.base.optimizer.kfac.cadence = kfac_cadence::counted;
  node.sync.kfac.strategy = cov_inv_strategy::all_workers;
  BOOST_TEST(difference(node, chief)
             == "worker:1 differs from the chief in kfac.strategy: "
                "all_workers on worker:1, chief_worker on the chief");
}

BOOST_FIXTURE_TEST_CASE(the_placement_on_the_shards_is_named, chief_and_node) {
  node.sync.placement = placement_strategy::by_size;
  BOOST_TEST(differing_path(node.fingerprint(), chief.fingerprint())
             == "ps.placement");
  // The same strategy name with other shards' contents (another count).
  run three;
  three.sync.ps_tasks = 3;
  BOOST_TEST(differing_path(three.fingerprint(), chief.fingerprint())
             == "ps.tasks");
}

BOOST_FIXTURE_TEST_CASE(batch_size_and_replicas_are_named, chief_and_node) {
  node.sync.base.batch_size = 16;
  BOOST_TEST(differing_path(node.fingerprint(), chief.fingerprint())
             == "run.batch_size");
  node.sync.base.batch_size = 32;
  node.sync.replicas_to_aggregate = 2;
  BOOST_TEST(differing_path(node.fingerprint(), chief.fingerprint())
             == "run.replicas_to_aggregate");
}

BOOST_FIXTURE_TEST_CASE(other_data_are_told_apart_by_counts_and_contents,
                        chief_and_node) {
  node.train = make_fake_dataset(64, 1);
  auto d = compare_fingerprints(node.fingerprint(), chief.fingerprint());
  BOOST_REQUIRE(d);
  BOOST_TEST(d->path == "data.train.count");
  BOOST_TEST(d->first == "64");
  BOOST_TEST(d->second == "128");
  // Same counts and shapes, other examples: the digest differs.
  node.train = make_fake_dataset(128, 7);
  BOOST_TEST(differing_path(node.fingerprint(), chief.fingerprint())
             == "data.train.digest");
}

// The digest covers the whole set: one pixel of the last example, or one
// label, differing is enough (the head alone trained on at half accuracy).
BOOST_FIXTURE_TEST_CASE(data_differing_after_the_head_are_told_apart,
                        chief_and_node) {
  BOOST_REQUIRE(!compare_fingerprints(node.fingerprint(),
                                      chief.fingerprint()));
  node.train.pixels.back() ^= 1;
  node.train.digest = digest_of(node.train);
  BOOST_TEST(differing_path(node.fingerprint(), chief.fingerprint())
             == "data.train.digest");
  node.train = chief.train;
  node.test.labels.back() = static_cast<uint8_t>(
    (node.test.labels.back() + 1) % 10);
  node.test.digest = digest_of(node.test);
  BOOST_TEST(differing_path(node.fingerprint(), chief.fingerprint())
             == "data.test.digest");
}

BOOST_AUTO_TEST_CASE(kfac_precision_is_compared) {
  run chief;
  run node;
  chief.sync.base.optimizer.kind = optimizer_kind::kfac;
  node.sync.base.optimizer.kind = optimizer_kind::kfac;
  BOOST_REQUIRE(!compare_fingerprints(node.fingerprint(),
                                      chief.fingerprint()));
  node.sync.base.optimizer.kfac.precision = product_precision::bf16;
  BOOST_TEST(differing_path(node.fingerprint(), chief.fingerprint())
             == "optimizer.kfac.precision");
}

BOOST_AUTO_TEST_CASE(the_device_kind_is_compared_not_its_delay) {
  // A node on the benchmark-only delay device (zero gradients) among real
  // ones is refused by name; two delay devices with other figures (a
  // benchmark's stragglers) and two real backends agree.
  run chief;
  run node;
  node.sync.base.device.backend = "bench_delay:5";
  BOOST_TEST(difference(node, chief)
             == "worker:1 differs from the chief in device.kind: "
                "bench_delay on worker:1, real on the chief");
  chief.sync.base.device.backend = "bench_delay:20:pareto:1.5";
  BOOST_TEST(difference(node, chief) == "none");
  node.sync.base.device.backend = "cuda";
  chief.sync.base.device.backend = "cpu";
  BOOST_TEST(difference(node, chief) == "none");
}

BOOST_AUTO_TEST_CASE(a_node_without_data_is_compared_on_the_rest) {
  run chief;
  run shard;
  auto fp = shard.fingerprint(false);
  BOOST_TEST(!fp.value_of("data.train.count").has_value());
  BOOST_TEST(!compare_fingerprints(fp, chief.fingerprint()));
  shard.sync.placement = placement_strategy::by_size;
  BOOST_TEST(differing_path(shard.fingerprint(false), chief.fingerprint())
             == "ps.placement");
}

BOOST_AUTO_TEST_CASE(only_the_chief_compares) {
  run a;
  run b;
  b.sync.base.optimizer.learning_rate = 0.5f;
  auto fa = a.fingerprint();
  auto fb = b.fingerprint();
  // The chief refuses a worker that differs, a worker the chief; two
  // other nodes are not compared, nor is a record that is empty.
  auto at_chief = configuration_refusal({"chief", 0}, fa, "worker:1", fb);
  BOOST_TEST(at_chief
             == "worker:1 differs from the chief in optimizer.learning_rate: "
                "0.5 on worker:1, 0.01 on the chief");
  auto at_node = configuration_refusal({"ps", 0}, fb, "chief:0", fa);
  BOOST_TEST(at_node
             == "ps:0 differs from the chief in optimizer.learning_rate: "
                "0.5 on ps:0, 0.01 on the chief");
  BOOST_TEST(configuration_refusal({"ps", 0}, fa, "worker:1", fb).empty());
  BOOST_TEST(configuration_refusal({"chief", 0}, fa, "evaluator:0", {})
               .empty());
  BOOST_TEST(configuration_refusal({"chief", 0}, fa, "worker:1", fa).empty());
}

BOOST_AUTO_TEST_CASE(an_evaluator_is_compared_on_the_model_it_evaluates) {
  // The evaluator's record holds the model as built and nothing else: the
  // chief's optimizer, topology and data are not its business, nor is the
  // initialisation (it reads the variables, it never initialises them).
  run chief;
  chief.sync.base.optimizer.learning_rate = 0.5f;
  chief.sync.base.model.init = init_scheme::glorot;
  auto at_chief = chief.fingerprint();
  auto evaluated = model::make(model_spec{}, 7);
  BOOST_REQUIRE(evaluated);
  auto fp = make_model_fingerprint(**evaluated);
  BOOST_TEST(!fp.value_of("model.init").has_value());
  BOOST_TEST(fp.value_of("model.variables[0].shape").has_value());
  BOOST_TEST(!fp.value_of("optimizer.learning_rate").has_value());
  BOOST_TEST(configuration_refusal({"chief", 0}, at_chief, "evaluator:0", fp)
               .empty());
  // Another model is refused, naming the field and both values.
  model_spec mlp;
  mlp.arch = model_arch::mlp;
  auto other = model::make(mlp, 7);
  BOOST_REQUIRE(other);
  BOOST_TEST(configuration_refusal({"chief", 0}, at_chief, "evaluator:0",
                                   make_model_fingerprint(**other))
             == "evaluator:0 differs from the chief in model.arch: mlp on "
                "evaluator:0, convnet on the chief");
}
