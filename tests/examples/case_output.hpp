#pragma once

// What the processes of a test case printed, shown only when the case
// fails. A cluster run prints hundreds of lines; logged as it came, a
// failing case's error line sat deep inside that text, and CI's excerpt of
// a failed entry (its first and last lines) cut it out. Kept here, a
// passing case prints nothing, so a failure's first error is near the top
// of the entry's output, and the failed case's processes follow it.

#include <iostream>
#include <string>
#include <utility>

#include <boost/test/results_collector.hpp>
#include <boost/test/tree/observer.hpp>
#include <boost/test/tree/test_unit.hpp>
#include <boost/test/unit_test.hpp>

namespace syncfac::test {

class case_output : public boost::unit_test::test_observer {
public:
  /// Keeps `text` (under `label`) until the running case ends; it is
  /// printed then if the case failed.
  static void keep(const std::string& label, const std::string& text) {
    auto& self = instance();
    self.kept_ += "----- " + label + " -----\n" + text;
    if (!text.empty() && text.back() != '\n')
      self.kept_ += '\n';
  }

  void test_unit_finish(boost::unit_test::test_unit const& unit,
                        unsigned long) override {
    if (unit.p_type != boost::unit_test::TUT_CASE)
      return;
    // Boost.Test's collector counted the case's failures from its start
    // (an exception as a failed assertion), before this observer was
    // registered too.
    const auto& results = boost::unit_test::results_collector.results(unit.p_id);
    bool failed = results.p_assertions_failed > 0 || results.p_aborted
                  || results.p_timed_out;
    if (failed && !kept_.empty())
      std::cout << "===== what the processes of the failed case \""
                << unit.p_name.get() << "\" printed =====\n"
                << kept_ << "===== end of \"" << unit.p_name.get()
                << "\" =====" << std::endl;
    kept_.clear();
  }

private:
  /// One per test program, registered with Boost.Test on first use (a
  /// program that keeps nothing needs none).
  static case_output& instance() {
    static case_output self;
    return self;
  }

  case_output() { boost::unit_test::framework::register_observer(*this); }
  ~case_output() override {
    boost::unit_test::framework::deregister_observer(*this);
  }

  std::string kept_;
};

} // namespace syncfac::test
