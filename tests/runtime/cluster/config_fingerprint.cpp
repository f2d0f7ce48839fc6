#define BOOST_TEST_MODULE config_fingerprint
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/cluster/config_fingerprint.hpp"

using namespace syncfac;

namespace {

config_fingerprint chief_like() {
  config_fingerprint x;
  x.add("model.arch", "convnet");
  x.add("model.variables[3].shape", "[5,5,32,32]");
  x.add("optimizer.learning_rate", "0.01");
  x.add("data.train.count", "2048");
  return x;
}

} // namespace

BOOST_AUTO_TEST_CASE(equal_records_have_no_difference) {
  BOOST_TEST(!compare_fingerprints(chief_like(), chief_like()));
  BOOST_TEST(!compare_fingerprints({}, {}));
}

BOOST_AUTO_TEST_CASE(the_first_differing_field_is_named_with_both_values) {
  auto node = chief_like();
  node.add("model.variables[3].shape", "[5,5,32,64]");
  node.add("optimizer.learning_rate", "0.02");
  auto d = compare_fingerprints(node, chief_like());
  BOOST_REQUIRE(d);
  BOOST_TEST(d->path == "model.variables[3].shape");
  BOOST_TEST(d->first == "[5,5,32,64]");
  BOOST_TEST(d->second == "[5,5,32,32]");
  BOOST_TEST(describe_difference("worker:1", *d)
             == "worker:1 differs from the chief in "
                "model.variables[3].shape: [5,5,32,64] on worker:1, "
                "[5,5,32,32] on the chief");
}

BOOST_AUTO_TEST_CASE(a_field_only_one_side_has_is_a_difference) {
  auto node = chief_like();
  node.add("optimizer.kfac.damping", "0.001");
  auto d = compare_fingerprints(node, chief_like());
  BOOST_REQUIRE(d);
  BOOST_TEST(d->path == "optimizer.kfac.damping");
  BOOST_TEST(d->first == "0.001");
  BOOST_TEST(d->second == absent_value);
  d = compare_fingerprints(chief_like(), node);
  BOOST_REQUIRE(d);
  BOOST_TEST(d->first == absent_value);
  BOOST_TEST(d->second == "0.001");
}

BOOST_AUTO_TEST_CASE(omitted_sections_are_compared_only_where_both_have_them) {
  // A PS shard loads no data: its record says so and is not refused for
  // lacking the data fields, in either direction.
  config_fingerprint shard = chief_like();
  shard.fields.pop_back();
  shard.omitted.push_back("data.");
  BOOST_TEST(!compare_fingerprints(shard, chief_like()));
  BOOST_TEST(!compare_fingerprints(chief_like(), shard));
  // Outside the omitted prefix a missing field still counts.
  shard.fields.erase(shard.fields.begin());
  auto d = compare_fingerprints(shard, chief_like());
  BOOST_REQUIRE(d);
  BOOST_TEST(d->path == "model.arch");
  BOOST_TEST(d->first == absent_value);
}

BOOST_AUTO_TEST_CASE(adding_a_path_again_replaces_its_value) {
  config_fingerprint x;
  x.add("a", "1");
  x.add("a", "2");
  BOOST_REQUIRE_EQUAL(x.fields.size(), 1u);
  BOOST_TEST(*x.value_of("a") == "2");
  BOOST_TEST(!x.value_of("b"));
}

BOOST_AUTO_TEST_CASE(values_are_written_one_way_everywhere) {
  BOOST_TEST(fingerprint_value(0.01f) == "0.01");
  BOOST_TEST(fingerprint_value(0.0001f) == "0.0001");
  BOOST_TEST(fingerprint_value(1e-8f) == "1e-08");
  BOOST_TEST(fingerprint_value(0.999f) == "0.999");
  BOOST_TEST(fingerprint_value(0.0f) == "0");
  // Two floats one ulp apart get two texts.
  BOOST_TEST(fingerprint_value(0.1f)
             != fingerprint_value(std::nextafter(0.1f, 1.0f)));
  BOOST_TEST(fingerprint_value(std::vector<int64_t>{5, 5, 32, 64})
             == "[5,5,32,64]");
  BOOST_TEST(fingerprint_value(std::vector<int64_t>{}) == "[]");
  const uint8_t abc[] = {'a', 'b', 'c'};
  // FNV-1a 64 of "abc", the published test vector.
  BOOST_TEST(hex64(fnv1a(abc, 3)) == "e71fa2190541574b");
}
