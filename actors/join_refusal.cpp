#include "actors/join_refusal.hpp"

#include <algorithm>
#include <thread>

#include <caf/send.hpp>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

/// How long the refusing node stays after answering the chief's hello,
/// so that the answer is written before the process ends.
constexpr std::chrono::milliseconds linger{1000};

std::string ms(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

/// How often a wait for the chief looks whether a stop signal came.
constexpr std::chrono::milliseconds stop_poll{200};

/// A stop signal ends the wait to tell the chief (the scheduler wants the
/// task gone; the program then exits preempted).
bool stopped(const join_route& cfg, std::ostream& log) {
  if (!cfg.stop_requested || !cfg.stop_requested())
    return false;
  log << cfg.task.str() << ": a stop signal came; no longer waiting to "
      << "tell the chief why this task cannot join" << std::endl;
  return true;
}

/// A task that connects to the chief: tells the chief's node, retrying
/// until it answers or the connect timeout has passed.
void tell_chief(caf::actor_system& sys, caf::scoped_actor& self,
                const join_route& cfg, const task_id& chief_task,
                const std::string& why, std::ostream& log) {
  const auto me = cfg.task.str();
  const auto& addr = cfg.cluster.address(chief_task);
  const auto where = chief_task.str() + " at " + addr.str();
  log << me << ": cannot join the run (" << why << "); telling " << where
      << " (waiting up to " << ms(cfg.connect.timeout)
      << ", --connect_timeout_ms, for it)" << std::endl;
  auto deadline = clock_type::now() + cfg.connect.timeout;
  std::string last;
  bool reached = false;
  while (true) {
    auto chief = reach_node(sys, self, addr, cfg.connect.tls,
                            cfg.connect.request_timeout);
    if (!chief && reached) {
      // It was there and is gone: its run ended (another task's refusal,
      // say); no chief will come to hear this one.
      log << me << ": " << where << " went away before it took the word: "
          << render(chief.error()) << std::endl;
      return;
    }
    if (chief) {
      reached = true;
      bool told = false;
      self->request(*chief, cfg.connect.request_timeout, refuse_atom::value,
                    me, why)
        .receive([&](caf::ok_atom) { told = true; },
                 [&](caf::error& err) { last = render(err); });
      if (told) {
        log << me << ": " << chief_task.str() << " knows why" << std::endl;
        return;
      }
    } else {
      last = render(chief.error());
    }
    if (clock_type::now() >= deadline) {
      log << me << ": could not tell " << where << " within "
          << ms(cfg.connect.timeout) << ": " << last << std::endl;
      return;
    }
    if (stopped(cfg, log))
      return;
    std::this_thread::sleep_for(cfg.connect.retry);
  }
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
  bool asked = false;
  auto deadline = clock_type::now() + cfg.connect.timeout;
  while (!asked && clock_type::now() < deadline && !stopped(cfg, log))
    self->receive([&](refuse_atom, caf::ok_atom) { asked = true; },
                  caf::after(std::min<clock_type::duration>(
                    stop_poll, deadline - clock_type::now()))
                    >> [] {});
  if (asked) {
    // The answer is on its way; the process must not end before it is
    // written.
    std::this_thread::sleep_for(linger);
    log << me << ": " << chief.str() << " knows why" << std::endl;
  } else {
    log << me << ": " << chief.str() << " did not say hello within "
        << ms(cfg.connect.timeout) << std::endl;
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
  r.stop_requested = cfg.stop_requested;
  return r;
}

node_actor::behavior_type refusing_node(node_actor::pointer,
                                        task_id me, task_id chief,
                                        std::string why, caf::actor notify) {
  auto refusal = me.str() + " cannot join the run: " + why;
  return {
    [=](hello_atom, const node_hello& h) -> caf::result<node_info> {
      if (task_id{h.job, h.index} == chief && notify)
        caf::anon_send(notify, refuse_atom::value, caf::ok_atom::value);
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
