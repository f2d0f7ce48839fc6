#define BOOST_TEST_MODULE cluster_report
#include <boost/test/unit_test.hpp>

// The end-of-run report of a cluster (runtime/cluster/cluster_report.hpp)
// without an actor: roles in the order they were asked, an unreachable
// role with its reason, and the metrics part only where a sink was asked.

#include <string>

#include "runtime/cluster/cluster_report.hpp"

using namespace syncfac;

BOOST_AUTO_TEST_CASE(roles_keep_their_order_and_say_why_they_are_missing) {
  cluster_report r;
  r.tasks = 4;
  r.tls = true;
  json_object ps0;
  ps0.add("errors", int64_t{0}).add("stale_pushes", int64_t{2});
  r.counters("ps:0", ps0);
  r.unreachable("worker:1", gone_at_the_end());
  json_object w0;
  w0.add("steps", int64_t{7});
  r.counters("worker:0", w0);
  auto text = r.to_json().str();
  BOOST_CHECK_EQUAL(text,
                    std::string{R"({"tasks": 4, "tls": true, "roles": {)"}
                      + R"("ps:0": {"errors": 0, "stale_pushes": 2}, )"
                      + R"("worker:1": {"unreachable": ")" + gone_at_the_end()
                      + R"("}, "worker:0": {"steps": 7}}})");
}

BOOST_AUTO_TEST_CASE(the_metrics_part_is_there_only_when_a_sink_was_asked) {
  cluster_report r;
  BOOST_CHECK_EQUAL(r.to_json().str().find("metrics"), std::string::npos);
  json_object sources;
  sources.add("worker:0", json_object{}.add("last_step", int64_t{3}));
  r.metrics = sources;
  BOOST_CHECK_NE(
    r.to_json().str().find(R"("metrics": {"worker:0": {"last_step": 3}})"),
    std::string::npos);
}
