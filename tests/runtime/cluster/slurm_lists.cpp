#define BOOST_TEST_MODULE slurm_lists
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "runtime/cluster/slurm_lists.hpp"
#include "runtime/base/error.hpp"
#include "tests/helpers.hpp"

using namespace syncfac;

namespace {

using names = std::vector<std::string>;

names hosts(const std::string& value) {
  auto x = expand_slurm_hostlist("SLURM_JOB_NODELIST", value);
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  return *x;
}

/// The error of expanding `value` must be ec::invalid_config, name the
/// variable and its value, and contain `part`.
void refused(const std::string& value, const std::string& part) {
  test::check_error(expand_slurm_hostlist("SLURM_JOB_NODELIST", value),
                    ec::invalid_config,
                    {"SLURM_JOB_NODELIST='" + value + "'", part});
}

} // namespace

BOOST_AUTO_TEST_SUITE(host_lists)

BOOST_AUTO_TEST_CASE(plain_names) {
  BOOST_CHECK(hosts("node1") == names{"node1"});
  BOOST_CHECK(hosts("a,b,c") == (names{"a", "b", "c"}));
  BOOST_CHECK(hosts("n1.example.org") == names{"n1.example.org"});
}

BOOST_AUTO_TEST_CASE(ranges_and_single_numbers_keep_their_padding) {
  BOOST_CHECK(hosts("node[01-04,07]")
              == (names{"node01", "node02", "node03", "node04", "node07"}));
  BOOST_CHECK(hosts("n[08-11]") == (names{"n08", "n09", "n10", "n11"}));
  BOOST_CHECK(hosts("n[001-003]x") == (names{"n001x", "n002x", "n003x"}));
  BOOST_CHECK(hosts("n[9-10]") == (names{"n9", "n10"}));
  BOOST_CHECK(hosts("n[5]") == names{"n5"});
}

BOOST_AUTO_TEST_CASE(several_names_and_groups) {
  BOOST_CHECK(hosts("a[1-2],b3") == (names{"a1", "a2", "b3"}));
  BOOST_CHECK(hosts("r[1-2]n[1-2]")
              == (names{"r1n1", "r1n2", "r2n1", "r2n2"}));
  BOOST_CHECK(hosts("gpu[1,3],cpu[10-11]-ib")
              == (names{"gpu1", "gpu3", "cpu10-ib", "cpu11-ib"}));
}

BOOST_AUTO_TEST_CASE(malformed_lists_are_refused) {
  refused("", "empty host list");
  refused("node[1-4", "unbalanced '['");
  refused("node1-4]", "unbalanced ']'");
  refused("n[[1]]", "nested '['");
  refused("node[5-2]", "reversed range '5-2'");
  refused("node[]", "empty brackets");
  refused("node[a-b]", "bad range 'a-b'");
  refused("node[1-]", "bad range '1-'");
  refused("node[1,,2]", "bad range ''");
  refused("a,,b", "empty host name");
  refused("a,", "empty host name");
  refused("n[1-99999999]", "too long");
  refused("a b", "space");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(tasks_per_node)

BOOST_AUTO_TEST_CASE(counts_and_repeats) {
  auto x = expand_slurm_tasks_per_node("SLURM_TASKS_PER_NODE", "2(x3),1");
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  BOOST_CHECK(*x == (std::vector<int32_t>{2, 2, 2, 1}));
  x = expand_slurm_tasks_per_node("SLURM_TASKS_PER_NODE", "4");
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  BOOST_CHECK(*x == std::vector<int32_t>{4});
  x = expand_slurm_tasks_per_node("SLURM_TASKS_PER_NODE", "1,3(x2)");
  BOOST_REQUIRE_MESSAGE(x, test::why(x));
  BOOST_CHECK(*x == (std::vector<int32_t>{1, 3, 3}));
}

BOOST_AUTO_TEST_CASE(malformed_counts_are_refused) {
  for (const auto* bad : {"", "2(x)", "2(3)", "x", "2(x3", "0", "2(x0)", "1,"}) {
    auto x = expand_slurm_tasks_per_node("SLURM_TASKS_PER_NODE", bad);
    BOOST_REQUIRE_MESSAGE(!x, "accepted: " << bad);
    BOOST_CHECK_EQUAL(static_cast<ec>(x.error().code()), ec::invalid_config);
    auto msg = render(x.error());
    BOOST_CHECK_MESSAGE(msg.find(std::string{"SLURM_TASKS_PER_NODE='"} + bad
                                 + "'")
                          != std::string::npos,
                        msg);
  }
}

BOOST_AUTO_TEST_SUITE_END()
