#define BOOST_TEST_MODULE sync_placement
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/model.hpp"
#include "runtime/sync/placement.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;

namespace {

using placement = std::vector<std::vector<size_t>>;

/// The seed ConvNet's parameters: conv0/{kernel,bias} (416 values),
/// conv2/{kernel,bias} (6,416), fc4/{weights,bias} (7,850).
parameter_set convnet() {
  auto m = model::make(model_spec{}, 1);
  BOOST_REQUIRE_MESSAGE(m, test::why(m));
  return (*m)->parameters();
}

/// The variables of the seeds' test2Workers: two scalars and a [2, 1]
/// embedding-like table.
parameter_set seed_variables() {
  return {{"v0", tensor{tensor_shape{}, {0.0f}}},
          {"v1", tensor{tensor_shape{}, {1.0f}}},
          {"v_sparse", tensor{{2, 1}, {3.0f, 4.0f}}}};
}

parameter_set named(std::vector<std::pair<std::string, int64_t>> xs) {
  parameter_set result;
  for (auto& [name, n] : xs)
    result.push_back({name, tensor{{n}}});
  return result;
}

placement place(const parameter_set& vars, int shards,
                placement_strategy strategy) {
  auto result = place_variables(vars, shards, strategy);
  BOOST_REQUIRE_MESSAGE(result, test::why(result));
  return *result;
}

/// Every variable exactly once, over all shards.
void require_partition(const placement& p, size_t variables) {
  std::vector<int> hits(variables, 0);
  for (const auto& shard : p)
    for (auto i : shard) {
      BOOST_REQUIRE_LT(i, variables);
      ++hits[i];
    }
  for (size_t i = 0; i < variables; ++i)
    BOOST_TEST(hits[i] == 1, "variable #" << i << " placed " << hits[i]
                                          << " times");
}

} // namespace

BOOST_AUTO_TEST_CASE(strategies_print_and_parse) {
  for (auto x : {placement_strategy::round_robin, placement_strategy::by_size}) {
    auto parsed = parse_placement_strategy(to_string(x));
    BOOST_REQUIRE_MESSAGE(parsed, test::why(parsed));
    BOOST_TEST(static_cast<int>(*parsed) == static_cast<int>(x));
  }
  BOOST_TEST(std::string{to_string(placement_strategy::round_robin)}
             == "round_robin");
  BOOST_TEST(std::string{to_string(placement_strategy::by_size)} == "by_size");
  auto bad = parse_placement_strategy("by_cost");
  BOOST_REQUIRE(!bad);
  BOOST_TEST(render(bad.error()).find("by_cost") != std::string::npos);
  BOOST_TEST(!parse_placement_strategy(""));
}

BOOST_AUTO_TEST_CASE(round_robin_keeps_convnet_layers_together) {
  auto vars = convnet();
  BOOST_REQUIRE_EQUAL(vars.size(), 6u);
  BOOST_TEST(vars[0].name == "conv0/kernel");
  BOOST_TEST(vars[4].name == "fc4/weights");
  // conv0 -> 0, conv2 -> 1, fc4 wraps around to 0.
  auto two = place(vars, 2, placement_strategy::round_robin);
  BOOST_TEST(two == (placement{{0, 1, 4, 5}, {2, 3}}));
  auto three = place(vars, 3, placement_strategy::round_robin);
  BOOST_TEST(three == (placement{{0, 1}, {2, 3}, {4, 5}}));
  auto one = place(vars, 1, placement_strategy::round_robin);
  BOOST_TEST(one == (placement{{0, 1, 2, 3, 4, 5}}));
  require_partition(two, vars.size());
}

BOOST_AUTO_TEST_CASE(by_size_balances_convnet_layers) {
  auto vars = convnet();
  // fc4 (7,850 values) first onto shard 0; conv2 (6,416) onto the empty
  // shard 1; conv0 (416) onto the lighter shard 1.
  auto two = place(vars, 2, placement_strategy::by_size);
  BOOST_TEST(two == (placement{{4, 5}, {0, 1, 2, 3}}));
  auto three = place(vars, 3, placement_strategy::by_size);
  BOOST_TEST(three == (placement{{4, 5}, {2, 3}, {0, 1}}));
  require_partition(two, vars.size());
}

BOOST_AUTO_TEST_CASE(more_shards_than_layers_leave_some_empty) {
  auto vars = convnet();
  for (auto s : {placement_strategy::round_robin, placement_strategy::by_size}) {
    auto p = place(vars, 5, s);
    BOOST_REQUIRE_EQUAL(p.size(), 5u);
    require_partition(p, vars.size());
    BOOST_TEST(p[3].empty());
    BOOST_TEST(p[4].empty());
  }
  auto none = place({}, 3, placement_strategy::by_size);
  BOOST_TEST(none == (placement{{}, {}, {}}));
}

BOOST_AUTO_TEST_CASE(seed_variables_are_layers_of_their_own) {
  auto vars = seed_variables();
  // No '/' in the names: three groups of one variable each.
  auto rr = place(vars, 2, placement_strategy::round_robin);
  BOOST_TEST(rr == (placement{{0, 2}, {1}}));
  // v_sparse (2 values) first; v0 and v1 (1 value each) then both fit
  // on the lighter shard 1.
  auto bs = place(vars, 2, placement_strategy::by_size);
  BOOST_TEST(bs == (placement{{2}, {0, 1}}));
  auto three = place(vars, 3, placement_strategy::round_robin);
  BOOST_TEST(three == (placement{{0}, {1}, {2}}));
}

BOOST_AUTO_TEST_CASE(groups_are_formed_by_the_prefix_before_the_last_slash) {
  // "a" is scattered; "fc" (no slash) is not layer "fc/"; "net/a/w" and
  // "net/a/b" share the layer "net/a", "net/w" is layer "net".
  auto vars = named({{"a/w", 1},
                     {"b/w", 1},
                     {"a/b", 1},
                     {"fc", 1},
                     {"fc/bias", 1},
                     {"net/a/w", 1},
                     {"net/w", 1},
                     {"net/a/b", 1}});
  // Groups in order: a {0, 2}, b {1}, fc {3}, fc/ {4}, net/a {5, 7},
  // net {6}.
  auto p = place(vars, 6, placement_strategy::round_robin);
  BOOST_TEST(p == (placement{{0, 2}, {1}, {3}, {4}, {5, 7}, {6}}));
  // Equal loads: the lower shard wins; equal sizes keep their order.
  auto q = place(named({{"x/w", 2}, {"y/w", 2}, {"z/w", 2}}), 2,
                 placement_strategy::by_size);
  BOOST_TEST(q == (placement{{0, 2}, {1}}));
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_refused) {
  auto vars = convnet();
  for (int n : {0, -1})
    for (auto s :
         {placement_strategy::round_robin, placement_strategy::by_size})
      test::check_error(place_variables(vars, n, s), ec::invalid_config,
                        {"num_shards must be at least 1, got "
                         + std::to_string(n)});
  test::check_error(place_variables(named({{"a/w", 1}, {"a/w", 2}}), 2,
                                    placement_strategy::round_robin),
                    ec::invalid_config, {"'a/w' appears twice"});
  test::check_error(place_variables(named({{"a/w", 1}, {"", 2}}), 2,
                                    placement_strategy::by_size),
                    ec::invalid_config, {"variable #1 has an empty name"});
}
