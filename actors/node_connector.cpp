#include "actors/node_connector.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/connect_progress.hpp"
#include "runtime/base/error.hpp"
#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls_transport.hpp"

namespace syncfac {

namespace {

using clock_type = std::chrono::steady_clock;

/// One connect request: whom it waits for and whom it answers.
struct connect_job {
  connect_progress progress;
  caf::response_promise promise;
  /// Answered with one node_info (a supervisor's request) rather than all.
  bool single = false;
  clock_type::time_point started;
  /// Tasks with an attempt under way: at the deadline they may still
  /// answer (a slow handshake is not cut short), and the job ends when the
  /// last one has.
  std::set<std::string> in_flight;
  /// The deadline passed: no attempt follows a failed one.
  bool expired = false;
  /// When connect_options::abandon was asked last: once per retry pause
  /// of the job, however many peers it waits for.
  std::optional<clock_type::time_point> abandon_asked;
};

struct node_connector_state {
  static inline const char* name = "node_connector";
  cluster_spec cluster;
  node_hello hello;
  connect_options opts;
  std::ostream* log = nullptr;
  /// This node's message types, sorted (each answer is checked against
  /// them).
  std::vector<std::string> mine;
  /// CAF's middleman actor or the TLS one, or why there is none (TLS
  /// files OpenSSL refused).
  caf::expected<caf::io::middleman_actor> manager{caf::error{}};
  uint64_t next_job = 1;
  std::map<uint64_t, connect_job> jobs;

  std::string me() const {
    return task_id{hello.job, hello.index}.str();
  }
};

using self_ptr = caf::stateful_actor<node_connector_state>*;

std::chrono::seconds waited_since(clock_type::time_point started) {
  return std::chrono::duration_cast<std::chrono::seconds>(clock_type::now()
                                                          - started);
}

/// Answers job `id` (its answers or `err`) and forgets it.
void finish(self_ptr self, uint64_t id, caf::error err = {}) {
  auto& st = self->state;
  auto i = st.jobs.find(id);
  if (i == st.jobs.end())
    return;
  auto job = std::move(i->second);
  st.jobs.erase(i);
  if (err)
    job.promise.deliver(std::move(err));
  else if (job.single)
    job.promise.deliver(job.progress.answers().front());
  else
    job.promise.deliver(job.progress.answers());
}

/// Job `id` past its deadline: ends with the peers still missing once no
/// attempt is under way.
void end_if_expired(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto i = st.jobs.find(id);
  if (i == st.jobs.end() || !i->second.expired
      || !i->second.in_flight.empty())
    return;
  auto err = i->second.progress.timed_out(st.cluster,
                                          waited_since(i->second.started));
  finish(self, id, std::move(err));
}

/// The attempt at `task` for job `id` failed with `why`: the next one
/// comes as a timer message, or the job ends when `why` will not change.
void failed(self_ptr self, uint64_t id, const task_id& task,
            const caf::error& why) {
  auto& st = self->state;
  auto i = st.jobs.find(id);
  if (i == st.jobs.end())
    return;
  i->second.in_flight.erase(task.str());
  if (is_final_refusal(why))
    return finish(self, id, why);
  i->second.progress.failed(task, render(why));
  if (i->second.expired)
    return end_if_expired(self, id);
  self->delayed_send(self, st.opts.retry, connect_atom::value, id,
                     task.str());
}

/// The node at `task`'s address answered `info` for job `id`.
void answered(self_ptr self, uint64_t id, const task_id& task,
              node_info info) {
  auto& st = self->state;
  auto i = st.jobs.find(id);
  if (i == st.jobs.end())
    return;
  if (auto err = check_node_answer(task, st.cluster.address(task), info,
                                   st.mine))
    return finish(self, id, std::move(err));
  i->second.in_flight.erase(task.str());
  i->second.progress.reached[task.str()] = std::move(info);
  if (i->second.progress.done())
    return finish(self, id);
  end_if_expired(self, id);
}

/// Says hello to the node `peer` found at `task`'s address.
void say_hello(self_ptr self, uint64_t id, const task_id& task,
               const node_actor& peer) {
  auto& st = self->state;
  self->request(peer, st.opts.request_timeout, hello_atom::value, st.hello)
    .then([=](node_info& info) { answered(self, id, task, std::move(info)); },
          [=](caf::error& err) {
            auto& st = self->state;
            if (err == caf::sec::request_timeout)
              err = make_error(ec::timeout,
                               "no answer to the hello within "
                                 + std::to_string(
                                   st.opts.request_timeout.count())
                                 + " ms");
            failed(self, id, task, err);
          });
}

/// One attempt at `task` for job `id`: the middleman connects (or finds
/// the connection it has), then the node hears the hello.
void attempt(self_ptr self, uint64_t id, const task_id& task) {
  auto& st = self->state;
  if (!st.manager)
    return finish(self, id, st.manager.error());
  auto j = st.jobs.find(id);
  if (j == st.jobs.end())
    return;
  j->second.in_flight.insert(task.str());
  auto addr = st.cluster.address(task);
  self->request(*st.manager, st.opts.request_timeout, caf::connect_atom::value,
                addr.host, addr.port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr,
          std::set<std::string>& ifs) {
        auto& sys = self->system();
        caf::detail::type_list<node_actor> expected_ifs;
        if (!ptr)
          return failed(self, id, task,
                        caf::make_error(
                          caf::sec::no_actor_published_at_port));
        if (!sys.assignable(ifs, sys.message_types(expected_ifs)))
          return failed(self, id, task,
                        caf::make_error(
                          caf::sec::unexpected_actor_messaging_interface));
        say_hello(self, id, task, caf::actor_cast<node_actor>(ptr));
      },
      [=](caf::error& err) {
        auto& st = self->state;
        // A refused task hello ends the connection before CAF's
        // handshake, which CAF reports as a lost connection: say what was
        // refused.
        if (st.opts.tls)
          if (auto why = net::tls_refusal(self->system(), addr.host,
                                          addr.port);
              !why.empty())
            return failed(self, id, task,
                          make_error(ec::invalid_config, "TLS: " + why));
        if (err == caf::sec::request_timeout)
          err = make_error(ec::timeout,
                           "no handshake with " + addr.str()
                             + " (a frozen process?) within "
                             + std::to_string(st.opts.request_timeout.count())
                             + " ms");
        failed(self, id, task, err);
      });
}

/// A new job for `tasks`: its deadline and its reports as timer messages,
/// and a first attempt at each task.
caf::response_promise start(self_ptr self, const std::vector<task_id>& tasks,
                            bool single) {
  auto& st = self->state;
  auto id = st.next_job++;
  auto& job = st.jobs[id];
  job.progress.peers = tasks;
  job.promise = self->make_response_promise();
  job.single = single;
  job.started = clock_type::now();
  auto promise = job.promise;
  if (job.progress.done()) {
    finish(self, id);
    return promise;
  }
  self->delayed_send(self, st.opts.timeout, deadline_atom::value, id);
  if (st.log != nullptr && st.opts.report_every.count() > 0)
    self->delayed_send(self, st.opts.report_every, status_atom::value, id);
  for (const auto& t : job.progress.missing())
    attempt(self, id, t);
  return promise;
}

/// The tasks named in `names`, or an error naming the first one that does
/// not parse or that the cluster lacks.
caf::expected<std::vector<task_id>>
tasks_of(const cluster_spec& cluster, const std::vector<std::string>& names) {
  std::vector<task_id> out;
  for (const auto& name : names) {
    auto t = task_id::parse(name);
    if (!t)
      return t.error();
    if (!cluster.contains(*t))
      return make_error(ec::invalid_argument,
                        "no task " + in_quotes(name)
                          + " in the cluster to connect to");
    out.push_back(*t);
  }
  return out;
}

caf::behavior node_connector(self_ptr self, cluster_spec cluster,
                             node_hello hello, connect_options opts,
                             std::ostream* log) {
  auto& st = self->state;
  st.cluster = std::move(cluster);
  st.hello = std::move(hello);
  st.opts = std::move(opts);
  st.log = log;
  st.mine = known_message_types(self->system());
  st.manager = net::connection_manager(self->system(), st.opts.tls);
  return {
    [=](connect_atom, const std::vector<std::string>& names)
      -> caf::result<std::vector<node_info>> {
      auto tasks = tasks_of(self->state.cluster, names);
      if (!tasks)
        return tasks.error();
      return start(self, *tasks, false);
    },
    [=](connect_atom, const std::string& name) -> caf::result<node_info> {
      auto tasks = tasks_of(self->state.cluster, {name});
      if (!tasks)
        return tasks.error();
      return start(self, *tasks, true);
    },
    // The pause after a failed attempt is over.
    [=](connect_atom, uint64_t id, const std::string& name) {
      auto& st = self->state;
      auto i = st.jobs.find(id);
      if (i == st.jobs.end() || i->second.expired)
        return;
      auto& job = i->second;
      auto now = clock_type::now();
      bool ask = !job.abandon_asked
                 || now - *job.abandon_asked >= st.opts.retry;
      if (st.opts.abandon && ask) {
        job.abandon_asked = now;
        if (auto err = st.opts.abandon())
          return finish(self, id, std::move(err));
      }
      if (auto t = task_id::parse(name))
        attempt(self, id, *t);
    },
    [=](deadline_atom, uint64_t id) {
      auto& st = self->state;
      auto i = st.jobs.find(id);
      if (i == st.jobs.end())
        return;
      i->second.expired = true;
      end_if_expired(self, id);
    },
    [=](status_atom, uint64_t id) {
      auto& st = self->state;
      auto i = st.jobs.find(id);
      if (i == st.jobs.end() || st.log == nullptr)
        return;
      *st.log << i->second.progress.waiting_line(
                   st.me(), st.cluster, waited_since(i->second.started))
              << std::endl;
      self->delayed_send(self, st.opts.report_every, status_atom::value, id);
    },
  };
}

} // namespace

peer_connector_actor spawn_peer_connector(caf::actor_system& sys,
                                          cluster_spec cluster,
                                          node_hello hello,
                                          connect_options opts,
                                          std::ostream* log) {
  caf::actor a;
  if (opts.abandon)
    a = sys.spawn<caf::detached>(node_connector, std::move(cluster),
                                 std::move(hello), std::move(opts), log);
  else
    a = sys.spawn(node_connector, std::move(cluster), std::move(hello),
                  std::move(opts), log);
  return caf::actor_cast<peer_connector_actor>(a);
}

connector_actor spawn_node_connector(caf::actor_system& sys,
                                     cluster_spec cluster, node_hello hello,
                                     connect_options opts) {
  opts.request_timeout = std::min(opts.request_timeout,
                                  std::chrono::milliseconds{2000});
  return spawn_peer_connector(sys, std::move(cluster), std::move(hello),
                              std::move(opts), nullptr);
}

} // namespace syncfac
