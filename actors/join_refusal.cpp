#include "actors/join_refusal.hpp"

#include <set>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include "runtime/base/error.hpp"
#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls_transport.hpp"

namespace syncfac {

namespace {

/// Longest wait, after answering the chief's hello, for the chief's node
/// to go (it heard the refusal and ends its run), so that the answer is
/// written before this process ends.
constexpr std::chrono::milliseconds linger{1000};

std::string ms(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

std::string stop_line(const join_route& cfg) {
  return cfg.task.str() + ": a stop signal came; no longer waiting to "
         + "tell the chief why this task cannot join";
}

/// The actor that tells the chief's node why a task cannot join: one
/// attempt through the middleman at a time, the next after a retry timer,
/// until the chief's node took the word, the connect timeout passed, or a
/// stop signal came (preempt_atom). Answers its one request with the line
/// to log, then quits.
struct chief_teller_state {
  static inline const char* name = "chief_teller";
  join_route route;
  task_id chief;
  std::string why;
  /// CAF's middleman actor or the TLS one, or why there is none (TLS
  /// files OpenSSL refused).
  caf::expected<caf::io::middleman_actor> manager{caf::error{}};
  /// The last attempt's error.
  std::string last;
  /// Whether the chief's node was reached once (gone again: its run
  /// ended, no chief will come to hear the word).
  bool reached = false;
  caf::response_promise promise;

  std::string where() const {
    return chief.str() + " at " + route.cluster.address(chief).str();
  }
};

using teller_ptr = caf::stateful_actor<chief_teller_state>*;

void told(teller_ptr self, std::string line) {
  self->state.promise.deliver(std::move(line));
  self->quit();
}

void attempt_to_tell(teller_ptr self);

/// The attempt failed with `err`: another after the retry pause.
void not_told(teller_ptr self, std::string err) {
  auto& st = self->state;
  st.last = std::move(err);
  self->delayed_send(self, st.route.connect.retry, connect_atom::value);
}

void attempt_to_tell(teller_ptr self) {
  auto& st = self->state;
  if (!st.manager)
    return told(self, st.route.task.str() + ": could not tell " + st.where()
                        + ": " + render(st.manager.error()));
  const auto& addr = st.route.cluster.address(st.chief);
  auto rt = st.route.connect.request_timeout;
  self->request(*st.manager, rt, caf::connect_atom::value, addr.host, addr.port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr,
          std::set<std::string>&) {
        auto& st = self->state;
        if (!ptr)
          return not_told(self, render(caf::make_error(
                                  caf::sec::no_actor_published_at_port)));
        st.reached = true;
        auto chief_node = caf::actor_cast<node_actor>(ptr);
        self->request(chief_node, rt, refuse_atom::value, st.route.task.str(),
                      st.why)
          .then(
            [=](caf::ok_atom) {
              told(self, self->state.route.task.str() + ": "
                           + self->state.chief.str() + " knows why");
            },
            [=](caf::error& err) { not_told(self, render(err)); });
      },
      [=](caf::error& err) {
        auto& st = self->state;
        auto text = render(err);
        if (st.route.connect.tls)
          if (auto why = net::tls_refusal(self->system(), addr.host,
                                          addr.port);
              !why.empty())
            text = "TLS: " + why;
        // It was there and is gone: its run ended (another task's
        // refusal, say); no chief will come to hear this one.
        if (st.reached)
          return told(self, st.route.task.str() + ": " + st.where()
                              + " went away before it took the word: "
                              + text);
        not_told(self, std::move(text));
      });
}

caf::behavior chief_teller(teller_ptr self, join_route route, task_id chief,
                           std::string why) {
  auto& st = self->state;
  st.route = std::move(route);
  st.chief = std::move(chief);
  st.why = std::move(why);
  st.manager = net::connection_manager(self->system(), st.route.connect.tls);
  return {
    [=](refuse_atom) -> caf::result<std::string> {
      auto& st = self->state;
      st.promise = self->make_response_promise();
      self->delayed_send(self, st.route.connect.timeout, deadline_atom::value);
      attempt_to_tell(self);
      return st.promise;
    },
    // The retry pause is over.
    [=](connect_atom) { attempt_to_tell(self); },
    [=](deadline_atom) {
      auto& st = self->state;
      told(self, st.route.task.str() + ": could not tell " + st.where()
                   + " within " + ms(st.route.connect.timeout) + ": "
                   + st.last);
    },
    [=](preempt_atom, const std::string&) {
      told(self, stop_line(self->state.route));
    },
  };
}

/// A task that connects to the chief: tells the chief's node, retrying
/// until it answers or the connect timeout has passed.
void tell_chief(caf::actor_system& sys, caf::scoped_actor& self,
                const join_route& cfg, const task_id& chief_task,
                const std::string& why, std::ostream& log) {
  const auto me = cfg.task.str();
  const auto where = chief_task.str() + " at "
                     + cfg.cluster.address(chief_task).str();
  log << me << ": cannot join the run (" << why << "); telling " << where
      << " (waiting up to " << ms(cfg.connect.timeout)
      << ", --connect_timeout_ms, for it)" << std::endl;
  auto teller = sys.spawn(chief_teller, cfg, chief_task, why);
  // The teller answers by the connect timeout, once its attempt under way
  // (two requests, each bounded by the request timeout) is over.
  auto bound = cfg.connect.timeout + 3 * cfg.connect.request_timeout;
  auto answer = self->request(teller, bound, refuse_atom::value);
  // After the request, so that a signal that came before finds the
  // teller at work.
  if (cfg.send_stop_to)
    cfg.send_stop_to(teller);
  answer
    .receive([&](std::string& line) { log << line << std::endl; },
             [&](caf::error& err) {
               log << me << ": could not tell " << where << ": "
                   << render(err) << std::endl;
             });
  self->send_exit(teller, caf::exit_reason::user_shutdown);
}

/// A task the chief connects to: answers its hello with the refusal.
void answer_chief(caf::actor_system& sys, caf::scoped_actor& self,
                  const join_route& cfg, const task_id& chief,
                  const std::string& why, std::ostream& log) {
  const auto me = cfg.task.str();
  const auto& addr = cfg.cluster.address(cfg.task);
  auto n = sys.spawn(refusing_node, cfg.task, chief, why,
                     caf::actor_cast<caf::actor>(self));
  auto bound = publish_node(n, cfg.bind.empty() ? addr.host : cfg.bind,
                            addr.port, cfg.connect.tls);
  if (!bound) {
    log << me << ": cannot tell " << chief.str()
        << " why this task cannot join the run: " << render(bound.error())
        << std::endl;
    self->send_exit(n, caf::exit_reason::user_shutdown);
    return;
  }
  log << me << ": cannot join the run (" << why << "); answering "
      << chief.str() << "'s hello on " << bound->str()
      << " with that (waiting up to " << ms(cfg.connect.timeout)
      << ", --connect_timeout_ms, for it)" << std::endl;
  if (cfg.send_stop_to)
    cfg.send_stop_to(caf::actor_cast<caf::actor>(self));
  // One wait, for whichever comes first: the chief's hello, a stop
  // signal, the connect timeout.
  caf::actor chief_node;
  bool asked = false;
  self->receive(
    [&](refuse_atom, caf::ok_atom, caf::actor& from) {
      asked = true;
      chief_node = std::move(from);
    },
    [&](preempt_atom, std::string&) { log << stop_line(cfg) << std::endl; },
    caf::after(cfg.connect.timeout) >> [&] {
      log << me << ": " << chief.str() << " did not say hello within "
          << ms(cfg.connect.timeout) << std::endl;
    });
  if (asked) {
    // The answer is on its way; the process must not end before it is
    // written: the chief's node going away says it was (the chief ends
    // its run on it), at most `linger` later.
    if (chief_node) {
      self->monitor(chief_node);
      // One message at a time until the chief's node's down message (the
      // caller's actor may hear of others) or the linger is over.
      auto until = std::chrono::steady_clock::now() + linger;
      for (bool over = false; !over;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
        if (left.count() <= 0)
          break;
        self->receive(
          [&](caf::down_msg& dm) { over = dm.source == chief_node.address(); },
          caf::after(left) >> [&] { over = true; });
      }
    }
    log << me << ": " << chief.str() << " knows why" << std::endl;
  }
  self->send_exit(n, caf::exit_reason::user_shutdown);
}

} // namespace

bool chief_must_hear(const caf::error& err, const task_id& chief) {
  bool timed_out = err.category() == error_category
                   && err.code() == static_cast<uint8_t>(ec::timeout);
  return !timed_out
         && render(err).find("refused at connect to " + chief.str() + ": ")
              == std::string::npos;
}

join_route join_route::of(const cluster_run_config& cfg) {
  join_route r;
  r.cluster = cfg.cluster;
  r.task = cfg.task;
  r.bind = cfg.bind;
  r.connect = cfg.connect;
  r.connect.tls = cfg.tls;
  r.send_stop_to = cfg.send_stop_to;
  return r;
}

node_actor::behavior_type refusing_node(node_actor::pointer,
                                        task_id me, task_id chief,
                                        std::string why, caf::actor notify) {
  auto refusal = me.str() + " cannot join the run: " + why;
  return {
    [=](hello_atom, const node_hello& h) -> caf::result<node_info> {
      if (task_id{h.job, h.index} == chief && notify)
        caf::anon_send(notify, refuse_atom::value, caf::ok_atom::value,
                       h.node);
      return make_error(ec::invalid_config,
                        "refused at connect to " + me.str() + ": " + refusal);
    },
    [=](refuse_atom, const std::string& peer,
        const std::string&) -> caf::result<caf::ok_atom> {
      return make_error(ec::invalid_argument,
                        me.str() + " is not the chief (and cannot join the "
                                   "run itself): "
                          + peer + " told it why it cannot join");
    },
    [](shutdown_atom, const std::string&) -> caf::result<caf::ok_atom> {
      return caf::ok_atom::value;
    },
    [](hello_atom) {
      return caf::make_result(std::vector<std::string>{},
                              std::vector<caf::actor>{});
    },
  };
}

void refuse_to_join(caf::actor_system& sys, caf::scoped_actor& self,
                    const join_route& cfg, const task_id& chief,
                    bool connects_to_chief, const std::string& why,
                    std::ostream& log) {
  if (connects_to_chief)
    tell_chief(sys, self, cfg, chief, why, log);
  else
    answer_chief(sys, self, cfg, chief, why, log);
}

} // namespace syncfac
