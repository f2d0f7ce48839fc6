#define BOOST_TEST_MODULE compute_delay
#include <boost/test/unit_test.hpp>

// The benchmark delay device's spelling and its draws: fixed, log-normal
// and Pareto factors of mean 1, and every malformed value refused naming
// it.

#include <algorithm>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/sync/compute_delay.hpp"

using namespace syncfac;

namespace {

std::vector<double> draws_ms(const compute_delay& d, int n) {
  std::mt19937_64 rng{42};
  std::vector<double> out;
  for (int i = 0; i < n; ++i)
    out.push_back(d.draw(rng).count() / 1000.0);
  return out;
}

double mean(const std::vector<double>& xs) {
  double sum = 0;
  for (auto x : xs)
    sum += x;
  return sum / static_cast<double>(xs.size());
}

} // namespace

BOOST_AUTO_TEST_CASE(a_fixed_delay_is_the_same_every_step) {
  auto d = parse_compute_delay("bench_delay:2.5");
  BOOST_REQUIRE(d);
  for (auto ms : draws_ms(*d, 10))
    BOOST_TEST(ms == 2.5);
  BOOST_TEST(is_delay_device("bench_delay:1"));
  BOOST_TEST(!is_delay_device("cpu"));
  BOOST_TEST(!is_delay_device("bench_delayed:1"));
}

BOOST_AUTO_TEST_CASE(heavy_tailed_factors_have_mean_one) {
  for (std::string spec : {"bench_delay:10:lognormal:0.5",
                           "bench_delay:10:pareto:2.5"}) {
    auto d = parse_compute_delay(spec);
    BOOST_REQUIRE_MESSAGE(d, spec);
    auto xs = draws_ms(*d, 200000);
    BOOST_TEST(std::abs(mean(xs) - 10.0) < 0.3, spec << ": mean " << mean(xs));
    // A tail: some steps take well over twice the mean.
    auto slow = std::count_if(xs.begin(), xs.end(),
                              [](double x) { return x > 20; });
    BOOST_TEST(slow > 1000, spec << ": " << slow << " steps over 20 ms");
  }
  // The Pareto's floor is x_m = (alpha - 1) / alpha of the mean.
  auto p = parse_compute_delay("bench_delay:10:pareto:2.5");
  auto xs = draws_ms(*p, 10000);
  BOOST_TEST(*std::min_element(xs.begin(), xs.end()) >= 5.999);
}

BOOST_AUTO_TEST_CASE(random_gradients_follow_any_delay) {
  for (std::string spec : {"bench_delay:3:random",
                           "bench_delay:3:lognormal:0.5:random",
                           "bench_delay:3:pareto:2.5:random"}) {
    auto d = parse_compute_delay(spec);
    BOOST_REQUIRE_MESSAGE(d, spec);
    BOOST_TEST(d->random_gradients, spec);
    BOOST_TEST(d->ms == 3.0, spec);
  }
  auto plain = parse_compute_delay("bench_delay:3:pareto:2.5");
  BOOST_REQUIRE(plain);
  BOOST_TEST(!plain->random_gradients);
  BOOST_TEST((plain->dist == compute_delay::tail::pareto));
}

BOOST_AUTO_TEST_CASE(malformed_values_are_refused_by_name) {
  for (std::string bad :
       {"bench_delay", "bench_delay:", "bench_delay:x", "bench_delay:-1",
        "bench_delay:5:pareto", "bench_delay:5:pareto:1",
        "bench_delay:5:lognormal:0", "bench_delay:5:gamma:2",
        "bench_delay:5:pareto:2:7", "bench_delay:random",
        "bench_delay:5:random:random", "bench_delay:5:pareto:random",
        "bench_delay:5:random:pareto:2"}) {
    auto d = parse_compute_delay(bad);
    BOOST_REQUIRE_MESSAGE(!d, bad << " was accepted");
    BOOST_TEST(static_cast<int>(d.error().code())
               == static_cast<int>(ec::invalid_config));
    BOOST_TEST(render(d.error()).find("'" + bad + "'") != std::string::npos,
               render(d.error()));
  }
}
