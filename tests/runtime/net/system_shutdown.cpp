// The end of an actor system, bounded (runtime/system_shutdown.hpp): a
// system whose actors ended ends at once; past the bound, one with an
// actor that never ends, or one whose middleman sits in a blocking connect
// (a real one: a loopback listener whose accept queue is full drops the
// SYNs, and CAF's connect(2) retries for about two minutes), ends the
// process with the run's exit code, saying which of the two it waited
// for. Each case runs in a child process, as a program does.

#define BOOST_TEST_MODULE system_shutdown
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <iostream>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include "runtime/exit_codes.hpp"
#include "runtime/stop_signals.hpp"
#include "runtime/system_shutdown.hpp"

using namespace syncfac;
using clock_type = std::chrono::steady_clock;

namespace {

/// The exit code a child's end_actor_system ends it with past the bound.
constexpr int bound_exit_code = 7;

/// What a child that ended its actor system did.
struct shutdown_result {
  /// The child's exit status: 0 once end_actor_system returned, the
  /// scenario's code when the bound ended the process.
  int exit_code = -1;
  /// Seconds from the call of end_actor_system to the child's end.
  double seconds = 0;
  /// What the child said on stderr.
  std::string said;
};

/// Runs `scenario` (given a fresh actor system with the middleman; it
/// returns the run's exit code) in a child process, which then ends the
/// system with `limit` as a program does and exits 0 (or, past the
/// bound, with that code); returns what the child did. The child's
/// stderr goes into a pipe.
shutdown_result in_child(std::chrono::milliseconds limit,
                         std::function<int(caf::actor_system&)> scenario) {
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  auto pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 2);
    caf::actor_system_config cfg;
    cfg.load<caf::io::middleman>();
    auto sys = std::make_unique<caf::actor_system>(cfg);
    auto exit_code = scenario(*sys);
    std::cerr << "ending" << std::endl;
    end_actor_system(std::move(sys), limit, "task:0", exit_code, std::cerr);
    std::cerr << "ended" << std::endl;
    ::_exit(0);
  }
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  shutdown_result out;
  std::optional<clock_type::time_point> ending;
  // Bounded: the child ends within `limit` and a little, or this fails
  // naming the wait.
  auto deadline = clock_type::now() + limit + std::chrono::seconds{60};
  char buf[512];
  int status = 0;
  for (;;) {
    auto n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      out.said.append(buf, static_cast<size_t>(n));
      if (!ending && out.said.find("ending\n") != std::string::npos)
        ending = clock_type::now();
      continue;
    }
    if (::waitpid(pid, &status, WNOHANG) == pid)
      break;
    if (clock_type::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ::close(fds[0]);
      BOOST_FAIL("the child did not end its actor system within "
                 << limit.count() << " ms + 60 s; it said: " << out.said);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  auto ended = clock_type::now();
  ssize_t n = 0;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0)
    out.said.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  BOOST_REQUIRE_MESSAGE(WIFEXITED(status), "the child ended with status "
                                             << status << ": " << out.said);
  BOOST_REQUIRE_MESSAGE(ending, "the child never reached the end: "
                                  << out.said);
  out.exit_code = WEXITSTATUS(status);
  out.seconds = std::chrono::duration<double>(ended - *ending).count();
  return out;
}

bool says(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

/// A loopback listener that accepts nothing and whose accept queue is
/// full: a further connect's SYNs are dropped, so connect(2) blocks (the
/// kernel retries for about two minutes).
struct full_listener {
  int listener = -1;
  std::vector<int> clients;
  uint16_t port = 0;

  full_listener() {
    listener = ::socket(AF_INET, SOCK_STREAM, 0);
    BOOST_REQUIRE(listener >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr),
                         sizeof addr)
                  == 0);
    BOOST_REQUIRE(::listen(listener, 0) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    // A backlog of 0 holds one connection; a few more fill the queue.
    for (int i = 0; i < 3; ++i) {
      int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      ::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      clients.push_back(c);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }

  ~full_listener() {
    for (int c : clients)
      ::close(c);
    ::close(listener);
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(a_system_whose_actors_ended_ends_at_once) {
  auto res = in_child(std::chrono::milliseconds{5000},
                      [](caf::actor_system& sys) {
                        // An actor that ends by itself, as the roles do.
                        sys.spawn([](caf::event_based_actor* self) {
                          self->quit();
                        });
                        return bound_exit_code;
                      });
  BOOST_TEST(res.exit_code == 0, res.said);
  BOOST_TEST(res.said == "ending\nended\n", res.said);
  BOOST_TEST(res.seconds < 4.0);
}

BOOST_AUTO_TEST_CASE(an_actor_that_never_ends_is_left_to_the_exit) {
  auto res = in_child(std::chrono::milliseconds{500},
                      [](caf::actor_system& sys) {
                        // Alive while anyone holds it: this one is held
                        // by the system's child to the end.
                        static caf::actor forever
                          = sys.spawn([](caf::event_based_actor*)
                                        -> caf::behavior {
                            return {[](int) {}};
                          });
                        return bound_exit_code;
                      });
  BOOST_TEST(res.exit_code == bound_exit_code, res.said);
  BOOST_TEST(says(res.said, "task:0: 1 actor(s) of this node still running "
                            "500 ms after the run ended; exiting with its "
                            "code (7) without waiting"),
             res.said);
  BOOST_TEST(!says(res.said, "ended\n"), res.said);
  // (as the parent saw it: it reads the child's "ending" a little late)
  BOOST_TEST(res.seconds >= 0.4);
  BOOST_TEST(res.seconds < 10.0, res.seconds << " s for a bound of 0.5 s");
}

BOOST_AUTO_TEST_CASE(a_middleman_in_a_blocking_connect_is_left_to_the_exit) {
  full_listener peer;
  auto port = peer.port;
  auto res = in_child(std::chrono::milliseconds{1500},
                      [port](caf::actor_system& sys) {
                        // What a node does when it reconnects to a peer
                        // at the end of a run: the middleman connects.
                        caf::anon_send(sys.middleman().actor_handle(),
                                       caf::connect_atom::value,
                                       std::string{"127.0.0.1"}, port);
                        std::this_thread::sleep_for(
                          std::chrono::milliseconds{300});
                        return bound_exit_code;
                      });
  BOOST_TEST(res.exit_code == bound_exit_code, res.said);
  BOOST_TEST(says(res.said, "task:0: the actor system's network layer "
                            "(CAF's middleman"),
             res.said);
  BOOST_TEST(says(res.said, "did not stop within 1500 ms after the run ended"),
             res.said);
  BOOST_TEST(!says(res.said, "ended\n"), res.said);
  BOOST_TEST(res.seconds >= 1.4);
  BOOST_TEST(res.seconds < 15.0, res.seconds << " s for a bound of 1.5 s");
}

BOOST_AUTO_TEST_CASE(a_failed_run_after_a_stop_signal_exits_preempted) {
  // The code the programs give the bound: a failure after SIGTERM is
  // preempted (the scheduler may requeue it), as their normal exit says.
  auto res = in_child(std::chrono::milliseconds{500},
                      [](caf::actor_system& sys) {
                        static auto watcher
                          = stop_signal_watcher::install("task:0");
                        BOOST_REQUIRE(watcher);
                        ::kill(::getpid(), SIGTERM);
                        while (!(*watcher)->received())
                          std::this_thread::sleep_for(
                            std::chrono::milliseconds{5});
                        static caf::actor forever
                          = sys.spawn([](caf::event_based_actor*)
                                        -> caf::behavior {
                            return {[](int) {}};
                          });
                        return (*watcher)->exit_code_of(exit_codes::failure);
                      });
  BOOST_TEST(res.exit_code == exit_codes::preempted, res.said);
  BOOST_TEST(says(res.said, "exiting with its code (143)"), res.said);
}
