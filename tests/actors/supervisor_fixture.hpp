#pragma once

// What the supervisors' deterministic suites (tests/actors/supervisor.cpp,
// tests/actors/supervisor_chief.cpp) do the same way: an actor system on
// CAF's test scheduler (tests/test_scheduler.hpp), the stand-ins it spawns
// and shuts down at the end, the connectors answering what a test scripts,
// the supervisor's log lines, the run request handed to the supervisor, and
// a test's moves (kill, let time pass, say hello, script a connect, read the
// log). Each suite's fixture derives from supervisor_fixture<its handle, its
// answer> and adds its own stand-ins and configuration.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>

#include "actors/chief_supervisor.hpp"
#include "actors/supervisor.hpp"
#include "runtime/base/error.hpp"
#include "tests/actors/supervisor_stand_ins.hpp"
#include "tests/test_scheduler.hpp"

namespace syncfac::testing {

/// What the run request's answer holds when the request itself failed (the
/// supervisor died, the request ran out): the error, as a failed end.
template <class End>
End failed_run(caf::error err);

template <>
inline node_end failed_run<node_end>(caf::error err) {
  node_end e;
  e.exit_code = -1;
  e.error = std::move(err);
  return e;
}

template <>
inline chief_run_end failed_run<chief_run_end>(caf::error err) {
  chief_run_end e;
  e.error = std::move(err);
  return e;
}

/// Why a run ended, for a test that expected it to go on.
inline std::string why_ended(const node_end& e) {
  return e.reason;
}

inline std::string why_ended(const chief_run_end& e) {
  return render(e.error);
}

/// `Supervisor`: the supervisor's handle; `End`: its answer to the run
/// request (it lands in `end`).
template <class Supervisor, class End>
struct supervisor_fixture : test::deterministic_system {
  std::shared_ptr<std::vector<std::string>> lines
    = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<connect_script> connects
    = std::make_shared<connect_script>();
  /// The connector made for each task, the newest (a test thaws a held
  /// connect attempt through it).
  std::map<std::string, caf::actor> connectors;
  std::vector<caf::actor> spawned;
  Supervisor sup;
  std::shared_ptr<std::optional<End>> end
    = std::make_shared<std::optional<End>>();

  supervisor_fixture() = default;
  supervisor_fixture(const supervisor_fixture&) = delete;
  supervisor_fixture& operator=(const supervisor_fixture&) = delete;

  virtual ~supervisor_fixture() {
    shut_down();
  }

  /// Ends every actor the test made and runs what that sets off. A suite
  /// whose supervisor reads members of its own fixture calls this from its
  /// destructor, while those members still stand; here it then ends
  /// nothing more.
  void shut_down() {
    for (auto& a : spawned)
      self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& [task, c] : connectors)
      self->send_exit(c, caf::exit_reason::user_shutdown);
    if (sup)
      self->send_exit(sup, caf::exit_reason::user_shutdown);
    spawned.clear();
    connectors.clear();
    sup = Supervisor{};
    sched.run();
  }

  /// Spawns an actor that the fixture ends at the end of the test.
  template <class F, class... Ts>
  caf::actor spawn(F f, Ts&&... xs) {
    auto a = sys.spawn(f, std::forward<Ts>(xs)...);
    spawned.push_back(a);
    return a;
  }

  /// The configuration's connector factory: a stand-in connector per
  /// task, answering from `connects`, kept in `connectors`.
  std::function<connector_actor(const std::string&)> scripted_connectors() {
    auto script = connects;
    auto* made = &connectors;
    auto* system = &sys;
    return [script, made, system](const std::string& task) {
      auto c = system->spawn(stand_in_connector, script);
      (*made)[task] = c;
      return caf::actor_cast<connector_actor>(c);
    };
  }

  /// The configuration's log: its lines land in `lines`.
  std::function<void(const std::string&)> log_into_lines() {
    auto out = lines;
    return [out](const std::string& line) { out->push_back(line); };
  }

  /// Hands the supervisor the run, as the program does (a request that
  /// waits as long as the run may take); the answer lands in `end`.
  template <class Wiring>
  void hand_run(Wiring w, std::chrono::seconds run_timeout) {
    auto out = end;
    auto target = sup;
    spawn([out, target, w, run_timeout](caf::event_based_actor* prog)
            -> caf::behavior {
      prog->request(target, run_timeout, run_atom::value, w)
        .then([out](End& e) { *out = std::move(e); },
              [out](caf::error& err) {
                *out = failed_run<End>(std::move(err));
              });
      return {[](int32_t) {}};
    });
    sched.run();
  }

  void send_sup(caf::message msg) {
    self->send(caf::actor_cast<caf::actor>(sup), std::move(msg));
    sched.run();
  }

  /// The node actor's word: `task` said hello from `node`.
  void say_hello(const std::string& task, const caf::actor& node) {
    send_sup(caf::make_message(hello_atom::value, task, node));
  }

  void kill(const caf::actor& a) {
    self->send_exit(a, caf::exit_reason::kill);
    sched.run();
  }

  void advance(std::chrono::milliseconds d) {
    sched.clock().advance_time(d);
    sched.run();
  }

  /// Lets `d` pass a second at a time, so that timers set on the way fire
  /// when they are due (one advance fires only what was due before it).
  void pass(std::chrono::seconds d) {
    using std::chrono::seconds;
    for (auto i = seconds{0}; i < d; i += seconds{1})
      advance(seconds{1});
  }

  /// The task's connector answers its next attempt: `info` (the task is
  /// back at its address) or, without it, `err`.
  void answer_connect(const std::string& task, std::optional<node_info> info,
                      caf::error err = {}) {
    connects->answers[task].push_back({std::move(info), std::move(err)});
  }

  bool logged(const std::string& part) const {
    for (auto& l : *lines)
      if (l.find(part) != std::string::npos)
        return true;
    return false;
  }

  std::string all_lines() const {
    std::string out;
    for (auto& l : *lines)
      out += l + "\n";
    return out;
  }

  /// The run has ended (the caller then checks how).
  void require_an_end() {
    BOOST_REQUIRE_MESSAGE(end->has_value(), "no end yet; log:\n"
                                              + all_lines());
  }

  void require_running() {
    BOOST_REQUIRE_MESSAGE(!end->has_value(),
                          "ended early: "
                            + (end->has_value() ? why_ended(**end) : "")
                            + "; log:\n" + all_lines());
  }
};

} // namespace syncfac::testing
