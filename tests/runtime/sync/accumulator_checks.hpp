#pragma once

// Checks the accumulator suites share (conditional_accumulator.cpp,
// sparse_accumulator.cpp): both accumulators count alike.

#include <cstdint>
#include <string>

#include <boost/test/unit_test.hpp>

namespace syncfac::test {

/// The gradients `acc` holds now, and those it accepted and dropped as
/// stale since it was made.
template <class Accumulator>
void check_counters(const Accumulator& acc, int64_t count, int64_t accepted,
                    int64_t dropped_stale) {
  BOOST_TEST(acc.count() == count);
  BOOST_TEST(acc.accepted() == accepted);
  BOOST_TEST(acc.dropped_stale() == dropped_stale);
}

/// An accumulator's stats: its variable and its counters.
template <class Stats>
void check_stats(const Stats& stats, const std::string& variable,
                 int64_t accepted, int64_t dropped_stale, int64_t refused,
                 int64_t global_step) {
  BOOST_TEST(stats.variable == variable);
  BOOST_TEST(stats.accepted == accepted);
  BOOST_TEST(stats.dropped_stale == dropped_stale);
  BOOST_TEST(stats.refused == refused);
  BOOST_TEST(stats.global_step == global_step);
}

} // namespace syncfac::test
