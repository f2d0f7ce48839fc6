#define BOOST_TEST_MODULE model_description
#include <boost/test/unit_test.hpp>

// Model descriptions and model files (docs/models.md): the built-ins'
// files against builtin_description, derived names, K-FAC's registration
// of dense and conv2d layers, the canonical JSON, and what is refused.

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "runtime/base/error.hpp"
#include "runtime/model.hpp"
#include "runtime/moving_statistic.hpp"
#include "runtime/model_builder.hpp"
#include "runtime/json_reader.hpp"
#include "runtime/model_file.hpp"
#include "runtime/model_footprint.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;

namespace {

const std::string models = SYNCFAC_SOURCE_DIR "/examples/models/";

model_description load(const std::string& file) {
  auto desc = load_model_file(models + file);
  BOOST_REQUIRE_MESSAGE(desc, test::why(desc));
  return *desc;
}

std::unique_ptr<model> build(const model_spec& spec, uint64_t seed = 5) {
  auto m = model::make(spec, seed);
  BOOST_REQUIRE_MESSAGE(m, test::why(m));
  return std::move(*m);
}

/// Same variable names, shapes and values.
void check_same_parameters(const model& a, const model& b) {
  const auto& x = a.parameters();
  const auto& y = b.parameters();
  BOOST_REQUIRE_EQUAL(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    BOOST_TEST(x[i].name == y[i].name);
    BOOST_TEST(x[i].value.shape() == y[i].value.shape());
    BOOST_TEST(x[i].value.values() == y[i].value.values());
  }
}

std::string parse_error(const std::string& text) {
  auto desc = parse_model_description(text, "model file 'x.json'");
  if (desc) {
    auto built = model::make(described_spec(*desc), 0);
    if (built)
      return "";
    return render(built.error());
  }
  return render(desc.error());
}

} // namespace

BOOST_AUTO_TEST_CASE(builtin_files_build_the_builtin_models) {
  model_spec convnet;
  model_spec mlp;
  mlp.arch = model_arch::mlp;
  auto ae = autoencoder_spec();
  for (auto [spec, file] : {std::pair{convnet, "seeds_convnet.json"},
                            std::pair{mlp, "seeds_mlp.json"},
                            std::pair{ae, "autoencoder.json"}}) {
    BOOST_TEST_CONTEXT(file) {
      auto described = described_spec(load(file));
      described.init = spec.init;
      auto a = build(spec);
      auto b = build(described);
      check_same_parameters(*a, *b);
      if (!a->spec().reconstructs())
        BOOST_TEST(b->spec().num_classes == a->spec().num_classes);
      BOOST_TEST(b->spec().reconstructs() == a->spec().reconstructs());
      BOOST_TEST(b->kfac_collection().layers.size()
                 == a->kfac_collection().layers.size());
    }
  }
}

BOOST_AUTO_TEST_CASE(names_are_derived_as_the_seeds_name_layers) {
  auto m = build(described_spec(load("seeds_convnet.json")));
  std::vector<std::string> names;
  for (const auto& p : m->parameters())
    names.push_back(p.name);
  std::vector<std::string> expected = {"conv0/kernel", "conv0/bias",
                                       "conv2/kernel", "conv2/bias",
                                       "fc4/weights",  "fc4/bias"};
  BOOST_TEST(names == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(dense_and_conv2d_layers_are_registered_with_kfac) {
  auto desc = parse_model_description(R"({"input_shape": [12, 12, 2],
    "layers": [{"type": "conv2d", "filters": 4, "kernel": 3},
               {"type": "tanh"},
               {"type": "max_pool", "window": 2},
               {"type": "conv2d", "name": "mid", "filters": 3, "kernel": 3,
                "stride": 2, "padding": "SAME", "init": "he"},
               {"type": "flatten"},
               {"type": "dense", "units": 6, "activation": "relu"},
               {"type": "dense", "units": 3}],
    "loss": "softmax_cross_entropy"})",
                                      "test");
  BOOST_REQUIRE_MESSAGE(desc, test::why(desc));
  auto m = build(described_spec(*desc));
  const auto& layers = m->kfac_collection().layers;
  BOOST_REQUIRE_EQUAL(layers.size(), 4u);
  BOOST_TEST(layers[0].name == "conv0");
  BOOST_TEST((layers[0].kind == layer_kind::conv2d));
  BOOST_TEST(layers[0].a_dim == 3 * 3 * 2 + 1);
  BOOST_TEST(layers[0].locations == 10 * 10); // VALID 3x3 on 12x12
  BOOST_TEST(layers[1].name == "mid");
  BOOST_TEST(layers[1].locations == 3 * 3);   // SAME stride 2 on 5x5
  BOOST_TEST((layers[2].kind == layer_kind::dense));
  BOOST_TEST(layers[2].name == "fc3");
  BOOST_TEST(layers[2].a_dim == 3 * 3 * 3 + 1);
  BOOST_TEST(layers[3].name == "fc4");
  BOOST_TEST(m->spec().num_classes == 3);
  // The tanh layer is conv0's activation: its output is bounded by 1.
  tensor x{2, 12, 12, 2};
  for (int64_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<float>(i % 7);
  auto dev = make_cpu_backend(1);
  auto res = m->forward_backward(*dev, x, {0, 2});
  BOOST_REQUIRE_MESSAGE(res, test::why(res));
  BOOST_TEST(m->kfac_layers().size() == 4u);
}

BOOST_AUTO_TEST_CASE(canonical_json_reads_back_to_the_same_description) {
  for (auto file : {"seeds_convnet.json", "seeds_mlp.json",
                    "autoencoder.json", "residual_convnet.json",
                    "resnet20.json"}) {
    BOOST_TEST_CONTEXT(file) {
      auto desc = load(file);
      auto again = parse_model_description(desc.to_json(), "canonical");
      BOOST_REQUIRE_MESSAGE(again, test::why(again));
      // Names come out derived: equal models, equal variables.
      auto a = build(described_spec(desc));
      auto b = build(described_spec(*again));
      check_same_parameters(*a, *b);
      BOOST_TEST(again->to_json() == desc.to_json());
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_descriptions_are_refused_by_name) {
  auto says = [](const std::string& text,
                 std::vector<std::string> needles) {
    auto msg = parse_error(text);
    BOOST_TEST(!msg.empty(), "accepted: " << text);
    for (const auto& n : needles)
      BOOST_TEST(msg.find(n) != std::string::npos,
                 "'" << n << "' not in: " << msg);
  };
  std::string loss = R"(, "loss": "softmax_cross_entropy"})";
  says("[1, 2]", {"x.json", "not a JSON object"});
  says("{\"input_shape\": [28, 28,", {"x.json", "not JSON"});
  says(R"({"layers": [{"type": "flatten"}])" + loss,
       {"missing field 'input_shape'"});
  says(R"({"input_shape": [28, 28], "layers": [{"type": "flatten"},
          {"type": "dense", "units": 10}]})",
       {"missing field 'loss'"});
  says(R"({"input_shape": [28], "layers": [], "loss": "hinge"})",
       {"'loss' is 'hinge'"});
  says(R"({"input_shape": [28, 0], "layers": [{"type": "flatten"}])" + loss,
       {"input_shape", "positive"});
  says(R"({"input_shape": [4], "layers": [{"type": "embedding"}])" + loss,
       {"layer 0", "unknown layer type 'embedding'"});
  says(R"({"input_shape": [4], "layers": [{"type": "dense", "units": 2.5}])"
         + loss,
       {"layer 0 (dense)", "'units' must be an integer", "number 2.5"});
  says(R"({"input_shape": [4], "layers": [{"type": "dense", "units": 0}])"
         + loss,
       {"layer 0 (dense 'fc0')", "units must be a positive integer"});
  says(R"({"input_shape": [4, 4, 1], "layers": [{"type": "conv2d",
          "filters": 2, "kernel": 3, "padding": "FULL"}])" + loss,
       {"layer 0 (conv2d)", "'padding' is 'FULL'"});
  says(R"({"input_shape": [4], "layers": [{"type": "dense", "units": 3,
          "name": "a"}, {"type": "dense", "units": 3, "name": "a"}])" + loss,
       {"layer 1 (dense 'a')", "used by an earlier layer"});
  says(R"({"input_shape": [4], "layers": [{"type": "dense", "units": 3,
          "name": "a/b"}])" + loss,
       {"layer 0", "name must be"});
  says(R"({"input_shape": [4], "layers": [{"type": "dense", "units": 3,
          "init": "zeros"}])" + loss,
       {"layer 0", "init 'zeros'"});
  says(R"({"input_shape": [4, 4, 1], "layers": [{"type": "relu"},
          {"type": "flatten"}, {"type": "dense", "units": 3}])" + loss,
       {"layer 0 (relu)", "must directly follow a dense, conv2d, add or batch_norm"});
  says(R"({"input_shape": [4], "layers": [{"type": "flatten"}, {"type":
          "dense", "units": 3, "activation": "relu"}, {"type": "tanh"}])"
         + loss,
       {"layer 2 (tanh)"});
  says(R"({"input_shape": [4, 4, 1], "layers": [{"type": "flatten"},
          {"type": "conv2d", "filters": 2, "kernel": 3}])" + loss,
       {"layer 1 (conv2d 'conv0')", "[-1, 16]", "[-1, height, width"});
  says(R"({"input_shape": [4], "layers": [{"type": "flatten"},
          {"type": "dense", "units": 1}])" + loss,
       {"[-1, 1]", "at least 2 classes"});
  // Graphs: what a layer names in "inputs".
  std::string two = R"({"input_shape": [4], "layers": [{"type": "dense",
          "units": 3, "name": "a"}, {"type": "dense", "units": 3,
          "name": "b", "inputs": ["input"]}, )";
  says(two + R"({"type": "add", "inputs": ["a", "c"]}, {"type": "dense",
          "units": 2, "name": "c"}])" + loss,
       {"layer 2 (add 'add2')", "input 'c' is layer 3 (dense 'c'), which "
                                "comes later"});
  says(two + R"({"type": "add", "inputs": "a"}])" + loss,
       {"layer 2 (add)", "'inputs' must be an array of layer names"});
  says(two + R"({"type": "add", "inputs": ["a", 1]}])" + loss,
       {"'inputs' must hold layer names"});
  says(two + R"({"type": "add", "inputs": ["a", "b"]}, {"type": "relu",
          "inputs": ["a"]}])" + loss,
       {"layer 3 (relu)", "unknown field 'inputs'"});
  says(two + R"({"type": "concat", "inputs": ["a", "b"],
          "activation": "relu"}])" + loss,
       {"unknown field 'activation'"});
  says(R"({"input_shape": [4], "layers": [{"type": "dense", "units": 3,
          "name": "input"}])" + loss,
       {"layer 0 (dense 'input')", "the model's input in 'inputs'"});
  says(R"({"input_shape": [4], "layers": [{"type": "flatten", "name": "f"},
          {"type": "dense", "units": 3, "name": "a"}, {"type": "dense",
          "units": 4, "name": "b", "inputs": ["f"]}, {"type": "add",
          "inputs": ["a", "b"]}])" + loss,
       {"layer 3 (add 'add2')", "input 1 is [-1, 4] and input 0 [-1, 3]"});
}

BOOST_AUTO_TEST_CASE(a_residual_model_file_builds_a_graph) {
  // examples/models/residual_convnet.json: two residual blocks, the
  // second with a 1x1 shortcut; its convolutions are K-FAC layers.
  auto desc = load("residual_convnet.json");
  auto m = build(described_spec(desc));
  BOOST_TEST(m->kfac_collection().layers.size() == 7u);
  auto dev = make_cpu_backend(1);
  tensor x{2, 28, 28, 1};
  x.fill(0.5f);
  auto res = m->forward_backward(*dev, x, {0, 2});
  BOOST_REQUIRE_MESSAGE(res, test::why(res));
  BOOST_TEST(m->summary().find("block2 (shortcut2 + block2b) -> "
                               "[-1, 7, 7, 32]")
               != std::string::npos,
             m->summary());
  // The footprint counts the graph's outputs: the adds' and the
  // shortcut's too.
  auto fp = measure_model(desc, "residual");
  BOOST_REQUIRE(fp);
  BOOST_TEST(fp->parameters == value_count(m->parameters()));
}

BOOST_AUTO_TEST_CASE(resnet20_is_three_stages_of_normalised_blocks) {
  auto desc = load("resnet20.json");
  auto m = build(described_spec(desc));
  // 19 3x3 convolutions, 2 projections and the classifier under K-FAC;
  // 21 batch_norm layers of 4 variables each.
  BOOST_TEST(m->kfac_collection().layers.size() == 22u);
  int64_t statistics = 0;
  int64_t params = 0;
  for (const auto& p : m->parameters()) {
    statistics += is_moving_statistic(p.name) ? 1 : 0;
    params += is_moving_statistic(p.name) ? 0 : p.value.size();
  }
  BOOST_TEST(statistics == 2 * 21);
  // He et al.'s ResNet-20 has 0.27M parameters (with 1x1 projections and
  // the convolutions' biases, a few more).
  BOOST_TEST(params > 270000);
  BOOST_TEST(params < 280000);
  BOOST_TEST(m->summary().find("pool -> [-1, 64]") != std::string::npos,
             m->summary());
  auto fp = measure_model(desc, "resnet20");
  BOOST_REQUIRE(fp);
  int64_t all = 0;
  for (const auto& p : m->parameters())
    all += p.value.size();
  BOOST_TEST(fp->parameters == static_cast<uint64_t>(all));
}

BOOST_AUTO_TEST_CASE(normalisation_pooling_and_dropout_fields_are_checked) {
  auto says = [](const std::string& layer, const std::string& needle) {
    auto msg = parse_error(R"({"input_shape": [4, 4, 2], "layers": [)"
                           + layer
                           + R"(, {"type": "flatten"},
                             {"type": "dense", "units": 2}],
                             "loss": "softmax_cross_entropy"})");
    BOOST_TEST(msg.find(needle) != std::string::npos,
               "'" << needle << "' not in: " << msg);
  };
  says(R"({"type": "dropout", "rate": 1})",
       "layer 0 (dropout 'dropout0'): rate must be in [0, 1), got 1");
  says(R"({"type": "dropout", "rate": "half"})",
       "field 'rate' must be a number");
  says(R"({"type": "batch_norm", "momentum": 1.5})",
       "layer 0 (batch_norm 'bn0'): momentum must be in [0, 1), got 1.5");
  says(R"({"type": "batch_norm", "epsilon": 0})",
       "epsilon must be in (0, 1], got 0");
  says(R"({"type": "batch_norm", "scale": true})",
       "unknown field 'scale' (expected type, name, inputs, momentum, "
       "epsilon, activation)");
  says(R"({"type": "avg_pool", "window": 0})", "window must be a positive");
  says(R"({"type": "avg_pool"})", "missing field 'window'");
  // A global pool of a flat input does not chain.
  auto flat = parse_model_description(
    R"({"input_shape": [8], "layers": [{"type": "flatten"},
        {"type": "dense", "units": 4},
        {"type": "global_avg_pool"}, {"type": "dense", "units": 2}],
        "loss": "softmax_cross_entropy"})",
    "x.json");
  BOOST_REQUIRE(flat);
  auto made = model::make(described_spec(*flat), 1);
  BOOST_REQUIRE(!made);
  BOOST_TEST(render(made.error()).find("global_avg_pool takes [-1, height, "
                                       "width, channels]")
               != std::string::npos,
             render(made.error()));
}

BOOST_AUTO_TEST_CASE(embedding_bag_means_rows_and_touches_only_them) {
  auto desc = model_builder{"bags", {3}}
                .embedding_bag(10, 2, bag_combiner::mean)
                .dense(2)
                .init("glorot")
                .build();
  BOOST_REQUIRE_MESSAGE(desc, test::why(desc));
  auto m = build(described_spec(*desc));
  BOOST_TEST(m->kfac_collection().layers.size() == 1u); // the dense only
  const auto& table = m->parameters()[0];
  BOOST_TEST(table.name == "emb0/embeddings");
  BOOST_TEST(table.value.shape() == (tensor_shape{10, 2}));
  // Bags {4, 7, pad} and {7, pad, pad}.
  tensor x{2, 1, 1, 3};
  float values[] = {4, 7, -1, 7, -1, -1};
  std::copy(values, values + 6, x.data());
  auto dev = make_cpu_backend(1);
  auto res = m->forward_backward(*dev, x, {0, 1});
  BOOST_REQUIRE_MESSAGE(res, test::why(res));
  auto rows = m->sparse_gradient_rows();
  BOOST_REQUIRE_EQUAL(rows.size(), 1u);
  BOOST_TEST(rows[0].variable == "emb0/embeddings");
  BOOST_TEST(*rows[0].rows == (std::vector<int64_t>{4, 7}));
  const auto& grad = m->gradients()[0].value;
  for (int64_t r = 0; r < 10; ++r)
    if (r != 4 && r != 7)
      BOOST_TEST((grad[r * 2] == 0.0f && grad[r * 2 + 1] == 0.0f));
  // Finite differences on a touched entry of the table: the mean loss
  // moves as the gradient says.
  auto loss_at = [&](float delta) {
    auto params = m->parameters();
    params[0].value[7 * 2 + 1] += delta;
    auto probe = build(described_spec(*desc));
    BOOST_REQUIRE(!probe->set_parameters(params));
    auto r = probe->evaluate(*dev, x, {0, 1});
    BOOST_REQUIRE(r);
    return r->mean_loss();
  };
  auto numeric = (loss_at(1e-2f) - loss_at(-1e-2f)) / 2e-2;
  BOOST_TEST(std::abs(numeric - grad[7 * 2 + 1]) < 1e-3,
             numeric << " vs " << grad[7 * 2 + 1]);
  // An index outside the vocabulary is named.
  x[0] = 10;
  auto bad = m->forward_backward(*dev, x, {0, 1});
  BOOST_REQUIRE(!bad);
  BOOST_TEST(render(bad.error()).find("vocabulary of 10") != std::string::npos);
  // Only as the first layer.
  auto late = model_builder{"late", {3}}
                .flatten()
                .embedding_bag(10, 2)
                .dense(2)
                .build();
  BOOST_REQUIRE(!late);
  BOOST_TEST(render(late.error()).find("must be the first layer")
             != std::string::npos);
}

// -- sizes before allocation and the JSON reader (docs/robustness.md) -------

// The measure from the description alone counts what model::make then
// allocates: every parameter, for the built-in models and described ones.
BOOST_AUTO_TEST_CASE(measure_counts_what_make_allocates) {
  model_spec mlp;
  mlp.arch = model_arch::mlp;
  auto described = parse_model_description(
    R"({"input_shape": [12, 10, 3], "layers": [)"
    R"({"type": "conv2d", "filters": 5, "kernel": 3, "stride": 2},)"
    R"({"type": "relu"}, {"type": "max_pool", "window": 2, "padding": "SAME"},)"
    R"({"type": "flatten"}, {"type": "dense", "units": 7}],)"
    R"("loss": "softmax_cross_entropy"})",
    "m.json");
  BOOST_REQUIRE_MESSAGE(described, test::why(described));
  for (const auto& spec : {model_spec{}, mlp, autoencoder_spec(),
                           described_spec(*described)}) {
    auto desc = builtin_description(spec);
    BOOST_TEST_CONTEXT(desc.name) {
      auto fp = measure_model(desc, "m");
      BOOST_REQUIRE_MESSAGE(fp, test::why(fp));
      auto built = build(spec);
      uint64_t params = 0;
      uint64_t largest = 0;
      for (const auto& p : built->parameters())
        params += static_cast<uint64_t>(p.value.size());
      BOOST_TEST(fp->parameters == params);
      for (const auto& l : built->kfac_collection().layers)
        largest = std::max<uint64_t>(
          largest, static_cast<uint64_t>(l.a_dim) * l.g_dim);
      // A layer's weights and biases: (a_dim - 1) * g + g = a_dim * g.
      BOOST_TEST(fp->largest_parameters == largest);
      BOOST_TEST(fp->activations_per_example > 0);
    }
  }
  // VALID 3x3 stride 2 on 12x10: 5x4; SAME pool 2 of it: 3x2; 5 filters.
  auto fp = measure_model(*described, "m");
  BOOST_REQUIRE(fp);
  BOOST_TEST(fp->activations_per_example == 12u * 10 * 3 + 5 * 4 * 5
                                              + 3 * 2 * 5 + 7);
}

BOOST_AUTO_TEST_CASE(measure_refuses_products_past_2_to_the_62) {
  auto refused = [](const std::string& json,
                    const std::vector<std::string>& needles) {
    auto desc = parse_model_description(json, "big.json");
    BOOST_REQUIRE_MESSAGE(desc, test::why(desc));
    auto fp = measure_model(*desc, "big.json");
    BOOST_REQUIRE(!fp);
    for (const auto& n : needles)
      BOOST_TEST(test::contains(render(fp.error()), n), render(fp.error()));
  };
  refused(R"({"input_shape": [1073741824, 1073741824, 8], "layers": [)"
          R"({"type": "flatten"}, {"type": "dense", "units": 2}],)"
          R"("loss": "softmax_cross_entropy"})",
          {"big.json: input_shape", "more than 2^62"});
  refused(R"({"input_shape": [1073741824, 1073741824, 4], "layers": [)"
          R"({"type": "flatten"}, {"type": "dense", "units": 16}],)"
          R"("loss": "softmax_cross_entropy"})",
          {"layer 1 (dense 'fc0')", "inputs x units",
           "4611686018427387904 x 16"});
  // Big but countable: measured, then refused by the memory check.
  auto desc = parse_model_description(
    R"({"input_shape": [784], "layers": [{"type": "flatten"}, )"
    R"({"type": "dense", "units": 1099511627776}, )"
    R"({"type": "dense", "units": 2}],)"
    R"("loss": "softmax_cross_entropy"})",
    "big.json");
  BOOST_REQUIRE(desc);
  auto fp = measure_model(*desc, "big.json");
  BOOST_REQUIRE(fp);
  BOOST_TEST(fp->largest_layer == "layer 1 (dense 'fc0')");
  auto err = check_model_buildable(*desc, "big.json");
  BOOST_REQUIRE(err);
  BOOST_TEST(test::contains(render(err), "this process may use"), render(err));
  BOOST_TEST(test::contains(render(err), "layer 1 (dense 'fc0') holds"),
             render(err));
}

BOOST_AUTO_TEST_CASE(json_reader_rules) {
  auto says = [](const std::string& text, const std::string& needle,
                 json_limits limits = {}) {
    auto doc = read_json(text, limits);
    BOOST_REQUIRE_MESSAGE(!doc, text);
    BOOST_TEST(test::contains(render(doc.error()), needle), render(doc.error()));
  };
  says(R"({"a": 1, "a": 2})", "key \"a\" appears twice at the top level");
  says(R"({"l": [{"x": 1}, {"x": 1, "x": 2}]})",
       "key \"x\" appears twice in \"l[1]\"");
  says(R"({"task": {"index": 0, "index": 1}})",
       "key \"index\" appears twice in \"task\"");
  // The same key in sibling objects is fine.
  BOOST_TEST(read_json(R"({"l": [{"x": 1}, {"x": 2}], "x": 3})").engaged());
  says(std::string(65, '[') + std::string(65, ']'),
       "nested deeper than 64 levels");
  BOOST_TEST(read_json(std::string(64, '[') + std::string(64, ']'))
               .engaged());
  json_limits small;
  small.max_bytes = 10;
  says(R"({"a": 12345})", "bytes of JSON, more than the 10", small);
  says("{\"a\": 1e400}", "not JSON");
  // Excerpts: at most the asked characters, cut between UTF-8 sequences.
  BOOST_TEST(json_excerpt(std::string(100, 'x'), 10)
             == "\"xxxxxxxxxx\"...");
  BOOST_TEST(json_excerpt("\xc3\xa9\xc3\xa9", 3) == "\"\xc3\xa9\"...");
  BOOST_TEST(json_excerpt("ab") == "\"ab\"");
}

// Validation is linear in the layers: names are derived once (it was
// quadratic: a few hundred KB of layers took minutes).
BOOST_AUTO_TEST_CASE(many_layers_are_checked_in_linear_time) {
  std::string layers = R"({"type": "flatten"})";
  for (int i = 0; i < 40000; ++i)
    layers += R"(, {"type": "dense", "units": 2})";
  auto text = R"({"input_shape": [4], "layers": [)" + layers
              + R"(], "loss": "softmax_cross_entropy"})";
  auto start = std::chrono::steady_clock::now();
  auto desc = parse_model_description(text, "long.json");
  BOOST_REQUIRE_MESSAGE(desc, test::why(desc));
  auto fp = measure_model(*desc, "long.json");
  BOOST_REQUIRE(fp);
  std::chrono::duration<double> took = std::chrono::steady_clock::now()
                                        - start;
  BOOST_TEST_MESSAGE("40001 layers read, checked and measured in "
                     << took.count() << " s");
  BOOST_TEST(fp->parameters == 4u * 2 + 2 + 39999u * (2 * 2 + 2));
  // Quadratic, 40000^2 label derivations took minutes; linear takes
  // well under a second even on a busy machine.
  BOOST_TEST(took.count() < 20.0);
}
