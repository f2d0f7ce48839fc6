#define BOOST_TEST_MODULE observe_prometheus_text
#include <boost/test/unit_test.hpp>

// The Prometheus text format written by hand: HELP and TYPE lines, labels
// escaped, values as the format spells them, families merged, names
// sanitised; and the run status's families and JSON.

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/observe/prometheus_text.hpp"
#include "runtime/observe/run_status.hpp"
#include "runtime/observe/status_page.hpp"

using namespace syncfac::observe;

BOOST_AUTO_TEST_CASE(a_family_is_help_type_and_samples) {
  std::vector<metric_family> fams{
    {"syncfac_global_step", "The run's global step.", metric_type::gauge,
     {{{{"job", "chief"}, {"task", "0"}}, 120}}},
    {"syncfac_pushes_total", "Pushes.", metric_type::counter,
     {{{{"role", "ps:0"}}, 3}, {{{"role", "ps:1"}}, 4.5}}}};
  auto want = "# HELP syncfac_global_step The run's global step.\n"
              "# TYPE syncfac_global_step gauge\n"
              "syncfac_global_step{job=\"chief\",task=\"0\"} 120\n"
              "# HELP syncfac_pushes_total Pushes.\n"
              "# TYPE syncfac_pushes_total counter\n"
              "syncfac_pushes_total{role=\"ps:0\"} 3\n"
              "syncfac_pushes_total{role=\"ps:1\"} 4.5\n";
  BOOST_TEST(exposition_text(fams) == want);
}

BOOST_AUTO_TEST_CASE(label_values_and_help_are_escaped) {
  BOOST_TEST(escape_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  std::vector<metric_family> fams{
    {"x", "line one\nback\\slash", metric_type::gauge, {{{}, 1}}}};
  BOOST_TEST(exposition_text(fams)
             == "# HELP x line one\\nback\\\\slash\n# TYPE x gauge\nx 1\n");
}

BOOST_AUTO_TEST_CASE(values_are_spelled_as_the_format_wants) {
  BOOST_TEST(format_sample_value(std::nan("")) == "NaN");
  BOOST_TEST(format_sample_value(std::numeric_limits<double>::infinity())
             == "+Inf");
  BOOST_TEST(format_sample_value(-std::numeric_limits<double>::infinity())
             == "-Inf");
  BOOST_TEST(format_sample_value(120) == "120");
  BOOST_TEST(format_sample_value(0.1) == "0.1");
  // Shortest form that reads back exactly.
  double third = 1.0 / 3;
  BOOST_TEST(std::stod(format_sample_value(third)) == third);
}

BOOST_AUTO_TEST_CASE(families_of_one_name_are_written_once) {
  std::vector<metric_family> fams{
    {"a", "first", metric_type::counter, {{{{"r", "1"}}, 1}}},
    {"b", "other", metric_type::gauge, {}},
    {"a", "second", metric_type::gauge, {{{{"r", "2"}}, 2}}}};
  auto text = exposition_text(fams);
  BOOST_TEST(text
             == "# HELP a first\n# TYPE a counter\na{r=\"1\"} 1\na{r=\"2\"} 2\n");
}

BOOST_AUTO_TEST_CASE(names_are_sanitised) {
  BOOST_TEST(sanitize_metric_name("syncfac_ok:x") == "syncfac_ok:x");
  BOOST_TEST(sanitize_metric_name("9lives-x.y") == "_lives_x_y");
  BOOST_TEST(sanitize_metric_name("") == "_");
}

BOOST_AUTO_TEST_CASE(the_run_status_becomes_families_and_json) {
  run_status st;
  st.set_total_steps(100);
  st.train(10, 1.0, {{"loss", 2.0}, {"train_accuracy", 0.5},
                     {"stale_pushes", 1}, {"examples_per_s", 100}});
  st.train(20, 2.0, {{"loss", 1.5}, {"train_accuracy", 0.6},
                     {"stale_pushes", 2}, {"examples_per_s", 110}});
  st.eval(20, 2.5, 1.2, 0.7);
  st.checkpoint_written("/tmp/ckpt-20.safetensors");
  st.task("worker:1", "lost", "chief: worker 1 lost at global step 20");
  st.event(20, "rolled back to global step 20");
  auto text = exposition_text(st.families({{"job", "chief"}, {"task", "0"}}));
  BOOST_TEST(text.find("syncfac_global_step{job=\"chief\",task=\"0\"} 20\n")
             != std::string::npos);
  BOOST_TEST(text.find("syncfac_steps_per_second{job=\"chief\",task=\"0\"} 10\n")
             != std::string::npos);
  BOOST_TEST(text.find("syncfac_train_loss{job=\"chief\",task=\"0\"} 1.5\n")
             != std::string::npos);
  BOOST_TEST(text.find("syncfac_test_accuracy{job=\"chief\",task=\"0\"} 0.7\n")
             != std::string::npos);
  BOOST_TEST(text.find("syncfac_task_up{job=\"chief\",task=\"0\",peer=\"worker:1\"} 0\n")
             != std::string::npos);
  BOOST_TEST(text.find("syncfac_checkpoint_age_seconds") != std::string::npos);
  auto j = nlohmann::json::parse(st.json());
  BOOST_TEST(j["global_step"].get<int>() == 20);
  BOOST_TEST(j["curves"]["loss"].size() == 2u);
  BOOST_TEST(j["curves"]["loss"][1][2].get<double>() == 1.5);
  BOOST_TEST(j["curves"]["test_accuracy"][0][0].get<int>() == 20);
  BOOST_TEST(j["tasks"][0]["task"].get<std::string>() == "worker:1");
  BOOST_TEST(j["tasks"][0]["state"].get<std::string>() == "lost");
  BOOST_TEST(j["events"][0]["step"].get<int>() == 20);
}

BOOST_AUTO_TEST_CASE(a_long_curve_is_thinned_not_cut) {
  run_status st;
  for (int64_t s = 1; s <= 5000; ++s)
    st.train(s, static_cast<double>(s), {{"loss", static_cast<double>(s)}});
  auto j = nlohmann::json::parse(st.json());
  const auto& loss = j["curves"]["loss"];
  BOOST_TEST(loss.size() <= run_status::max_points);
  BOOST_TEST(loss.front()[0].get<int>() == 1);
  BOOST_TEST(loss.back()[0].get<int>() == 5000);
}

BOOST_AUTO_TEST_CASE(a_diverged_loss_is_null_in_the_json) {
  run_status st;
  st.train(10, 1.0, {{"loss", std::nan("")}});
  auto j = nlohmann::json::parse(st.json());
  BOOST_TEST(j["curves"]["loss"][0][2].is_null());
}

BOOST_AUTO_TEST_CASE(the_status_page_embeds_its_data_safely) {
  auto page = status_page("chief:0", "{\"what\": \"</script><b>\"}");
  BOOST_TEST(page.find("</script><b>") == std::string::npos);
  BOOST_TEST(page.find("<\\/script><b>") != std::string::npos);
  BOOST_TEST(page.find("<h1>syncfac: chief:0</h1>") != std::string::npos);
  // No external assets.
  BOOST_TEST(page.find("src=") == std::string::npos);
  BOOST_TEST(page.find("href=") == std::string::npos);
}
