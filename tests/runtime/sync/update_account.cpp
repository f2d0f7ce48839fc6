#define BOOST_TEST_MODULE sync_update_account
#include <boost/test/unit_test.hpp>

// The chief's account of updates (runtime/sync/update_account.hpp): what
// a rollback throws away is counted once, what is applied again after it
// counts as redone, and the balance names every term when it is off.

#include "runtime/sync/update_account.hpp"

using syncfac::update_account;

namespace {

/// An account of a run that starts at `step`.
update_account started_at(int64_t step) {
  update_account a;
  a.start_at(step);
  return a;
}

/// Applies the updates of steps first..last, in order.
void apply_steps(update_account& a, int64_t first, int64_t last) {
  for (int64_t s = first; s <= last; ++s)
    a.apply(s);
}

/// The account's counts of updates applied, rolled back and redone.
void check_counts(const update_account& a, int64_t applied,
                  int64_t rolled_back, int64_t redone) {
  BOOST_TEST(a.applied == applied);
  BOOST_TEST(a.rolled_back == rolled_back);
  BOOST_TEST(a.redone == redone);
}

} // namespace

BOOST_AUTO_TEST_CASE(an_undisturbed_run_applies_every_step_once) {
  auto a = started_at(0);
  apply_steps(a, 1, 30);
  check_counts(a, 30, 0, 0);
  BOOST_TEST(a.imbalance(30).empty());
}

BOOST_AUTO_TEST_CASE(a_rollback_is_redone_step_by_step) {
  // Lost at 53, back to the checkpoint of 40, on to 60: 13 updates thrown
  // away and applied again, 60 + 13 applied in all.
  auto a = started_at(0);
  apply_steps(a, 1, 53);
  a.roll_back(53, 40);
  apply_steps(a, 41, 50);
  BOOST_TEST(a.redone == 10); // not all redone yet
  apply_steps(a, 51, 60);
  check_counts(a, 73, 13, 13);
  BOOST_TEST(a.imbalance(60).empty());
}

BOOST_AUTO_TEST_CASE(a_resumed_chief_inherits_the_start_step) {
  auto a = started_at(40);
  apply_steps(a, 41, 50);
  BOOST_TEST(a.redone == 0);
  BOOST_TEST(a.in_parameters() == 50);
  BOOST_TEST(a.imbalance(50).empty());
}

BOOST_AUTO_TEST_CASE(an_update_unaccounted_for_is_named) {
  auto a = started_at(0);
  a.apply(1);
  a.apply(2);
  auto why = a.imbalance(3);
  BOOST_TEST(why.find("global step 3") != std::string::npos, why);
  BOOST_TEST(why.find("applied 2") != std::string::npos, why);
  BOOST_TEST(why.find("= 2") != std::string::npos, why);
  // A rollback to a step ahead of the run throws nothing away.
  a.roll_back(2, 5);
  BOOST_TEST(a.rolled_back == 0);
}
