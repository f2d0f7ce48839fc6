#define BOOST_TEST_MODULE messages_row_pull
#include <boost/test/unit_test.hpp>

// Row pulls' pure logic (messages/row_pull.hpp): the rows a batch looks up,
// the shard's gather, the worker's scatter, and the answer on the wire.

#include <string>
#include <vector>

#include "messages/row_pull.hpp"
#include "tests/helpers.hpp"
#include "tests/wire_fixture.hpp"

using namespace syncfac;
using namespace syncfac::test;
namespace tt = boost::test_tools;

namespace {

/// A table [4, 3]: row r holds 10r, 10r + 1, 10r + 2.
named_tensor table() {
  tensor t{{4, 3}};
  for (int64_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<float>(10 * (i / 3) + i % 3);
  return {"emb", t};
}

} // namespace

BOOST_AUTO_TEST_CASE(the_rows_a_batch_looks_up_are_sorted_once_without_padding) {
  // Two bags of three: -1 pads, 7 twice.
  tensor bags{{2, 3, 1, 1}, {7.0f, 2.0f, -1.0f, 7.0f, 0.0f, -1.0f}};
  BOOST_TEST(rows_looked_up(bags) == (std::vector<int64_t>{0, 2, 7}),
             tt::per_element());
  BOOST_TEST(rows_looked_up(tensor{{1, 2}, {-1.0f, -1.0f}}).empty());
}

BOOST_AUTO_TEST_CASE(the_looked_up_table_is_the_first_embedding_bag_s) {
  model_description desc;
  desc.layers.resize(2);
  desc.layers[0].type = layer_type::embedding_bag;
  desc.layers[1].type = layer_type::dense;
  BOOST_TEST(looked_up_table(desc).value_or("") == "emb0/embeddings");
  desc.layers[0].name = "words";
  BOOST_TEST(looked_up_table(desc).value_or("") == "words/embeddings");
  desc.layers[0].type = layer_type::dense;
  BOOST_TEST(!looked_up_table(desc));
  BOOST_TEST(!looked_up_table(model_description{}));
}

BOOST_AUTO_TEST_CASE(gather_then_scatter_copies_exactly_those_rows) {
  auto t = table();
  auto rows = gather_rows(t, {1, 3});
  BOOST_REQUIRE_MESSAGE(rows, why(rows));
  BOOST_TEST(rows->variable == "emb");
  BOOST_TEST(rows->rows.shape() == (tensor_shape{2, 3}), tt::per_element());
  BOOST_TEST(rows->rows[0] == 10.0f);
  BOOST_TEST(rows->rows[5] == 32.0f);
  BOOST_TEST(payload_bytes(*rows) == 2 * 8 + 6 * 4);
  tensor copy{{4, 3}};
  BOOST_REQUIRE(!scatter_rows(*rows, copy));
  for (int64_t i = 0; i < copy.size(); ++i) {
    auto row = i / 3;
    float want = row == 1 || row == 3 ? t.value[i] : 0.0f;
    BOOST_TEST(copy[i] == want, "element " << i);
  }
  // No rows: an empty block of the row shape.
  auto none = gather_rows(t, {});
  BOOST_REQUIRE_MESSAGE(none, why(none));
  BOOST_TEST(none->rows.shape() == (tensor_shape{0, 3}), tt::per_element());
  BOOST_REQUIRE(!scatter_rows(*none, copy));
}

BOOST_AUTO_TEST_CASE(bad_row_ids_are_refused_naming_the_variable_the_id_and_rows) {
  auto t = table();
  auto msg = failure(gather_rows(t, {0, 4}), ec::invalid_argument);
  BOOST_TEST(contains(msg, "'emb'"), msg);
  BOOST_TEST(contains(msg, "row id 4"), msg);
  BOOST_TEST(contains(msg, "the table has 4 rows"), msg);
  msg = failure(gather_rows(t, {2, 2}), ec::invalid_argument);
  BOOST_TEST(contains(msg, "strictly increasing"), msg);
  // The worker's side: an id out of its table, rows of another width.
  tensor copy{{4, 3}};
  msg = failure(scatter_rows({"emb", {9}, tensor{{1, 3}}}, copy),
                ec::invalid_argument);
  BOOST_TEST(contains(msg, "row id 9"), msg);
  msg = failure(scatter_rows({"emb", {1}, tensor{{1, 2}}}, copy),
                ec::shape_mismatch);
  BOOST_TEST(contains(msg, "'emb'"), msg);
  for (int64_t i = 0; i < copy.size(); ++i)
    BOOST_TEST(copy[i] == 0.0f);
}

BOOST_FIXTURE_TEST_CASE(rows_and_requests_cross_the_wire_unchanged,
                        wire_fixture) {
  std::vector<row_request> asked{{"emb", {0, 5, 9}}};
  auto back = message_round_trip(asked);
  BOOST_REQUIRE_EQUAL(back.size(), 1u);
  BOOST_TEST(back[0].variable == "emb");
  BOOST_TEST(back[0].rows == asked[0].rows, tt::per_element());
  shard_params answer{3, 7, {{"w", tensor{{2}, {1.0f, 2.0f}}}}};
  answer.rows.push_back(*gather_rows(table(), {1, 2}));
  auto got = message_round_trip(answer);
  BOOST_TEST(got.shard == 3);
  BOOST_TEST(got.global_step == 7);
  BOOST_REQUIRE_EQUAL(got.rows.size(), 1u);
  BOOST_TEST(got.rows[0].indices == answer.rows[0].indices,
             tt::per_element());
  BOOST_TEST((got.rows[0].rows == answer.rows[0].rows));
  BOOST_TEST(same(got.values, answer.values));
}
