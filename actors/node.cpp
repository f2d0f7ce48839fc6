#include "actors/node.hpp"

#include "actors/node_connector.hpp"

#include <algorithm>
#include <cstdio>

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include "runtime/base/error.hpp"
#include "runtime/net/listen_address.hpp"
#include "runtime/net/task_identity.hpp"
#include "runtime/net/tls_transport.hpp"

namespace syncfac {

namespace {

/// Names in `a` missing from `b`, comma-separated.
std::string missing_from(const std::vector<std::string>& a,
                         const std::vector<std::string>& b) {
  std::string out;
  for (const auto& x : a)
    if (!std::binary_search(b.begin(), b.end(), x))
      out += (out.empty() ? "" : ", ") + x;
  return out;
}

/// Why a hello claiming task `peer` is refused for where it came from ("" when
/// it is not): with certificates bound to tasks, the connection it came
/// through must have been verified for that very task
/// (runtime/net/task_identity.hpp), so that a worker's key cannot register
/// as the chief or a PS shard (nor say for another task that it cannot
/// join the run).
std::string unverified_caller(caf::local_actor* self,
                              const std::string& peer) {
  auto& sys = self->system();
  if (!net::binds_tasks(sys))
    return {};
  const auto& sender = self->current_sender();
  if (!sender)
    return "the hello of " + peer + " came without a sender";
  if (sender->node() == sys.node())
    return {};
  auto verified = net::verified_task(sys, sender->node());
  if (!verified)
    return "the hello of " + peer
           + " came from a node that no task hello verified";
  if (verified->str() != peer)
    return "a node whose certificate is that of " + verified->str()
           + " claims to be " + peer;
  return {};
}

/// Why `peer` (who says `protocol` and `types`) cannot talk with `me`, or
/// an empty string.
std::string incompatibility(const std::string& peer, uint32_t protocol,
                            std::vector<std::string> types,
                            const std::vector<std::string>& mine) {
  if (protocol != cluster_protocol)
    return peer + " speaks cluster protocol " + std::to_string(protocol)
           + ", this node " + std::to_string(cluster_protocol);
  std::sort(types.begin(), types.end());
  auto unknown_here = missing_from(types, mine);
  auto unknown_there = missing_from(mine, types);
  if (unknown_here.empty() && unknown_there.empty())
    return {};
  std::string why = peer + " does not know the same message types";
  if (!unknown_here.empty())
    why += "; registered there but unknown here: " + unknown_here;
  if (!unknown_there.empty())
    why += "; registered here but unknown there: " + unknown_there;
  why += " (every node of a cluster must register the same types)";
  return why;
}

std::string task_name(const std::string& job, int32_t index) {
  return task_id{job, index}.str();
}

} // namespace

std::vector<std::string> known_message_types(caf::actor_system& sys) {
  const auto& types = sys.config().value_factories_by_name;
  // add_message_type<T>("x") also registers "std::vector<x>" and
  // "stream<x>": naming "x" says it all.
  auto derived = [&](const std::string& name) {
    for (const char* wrapper : {"std::vector<", "stream<"}) {
      std::string w = wrapper;
      if (name.size() > w.size() + 1 && name.compare(0, w.size(), w) == 0
          && name.back() == '>'
          && types.count(name.substr(w.size(), name.size() - w.size() - 1))
               > 0)
        return true;
    }
    return false;
  };
  std::vector<std::string> out;
  for (const auto& kvp : types)
    if (kvp.first.rfind("caf::", 0) != 0 && !derived(kvp.first))
      out.push_back(kvp.first);
  std::sort(out.begin(), out.end());
  return out;
}

caf::actor node_of(const node_info& info) {
  for (size_t i = 0; i < info.role_names.size(); ++i)
    if (info.role_names[i] == "node" && i < info.role_actors.size())
      return info.role_actors[i];
  return {};
}

std::vector<task_id>
missing_peers(const std::vector<task_id>& peers, const task_id& me,
              const std::map<std::string, node_info>& known) {
  std::vector<task_id> out;
  for (const auto& t : peers)
    if (t != me && known.count(t.str()) == 0
        && std::find(out.begin(), out.end(), t) == out.end())
      out.push_back(t);
  return out;
}

node_hello make_hello(caf::actor_system& sys, const task_id& me,
                      const caf::actor& my_node,
                      config_fingerprint fingerprint) {
  node_hello h;
  h.job = me.job;
  h.index = me.index;
  h.message_types = known_message_types(sys);
  h.node = my_node;
  h.fingerprint = std::move(fingerprint);
  return h;
}

std::string configuration_refusal(const task_id& me,
                                  const config_fingerprint& mine,
                                  const std::string& peer,
                                  const config_fingerprint& theirs,
                                  const task_id& chief_task) {
  if (mine.empty() || theirs.empty())
    return {};
  const std::string chief = chief_task.str();
  if (me.str() == chief) {
    if (auto d = compare_fingerprints(theirs, mine))
      return describe_difference(peer, *d);
  } else if (peer == chief) {
    if (auto d = compare_fingerprints(mine, theirs))
      return describe_difference(me.str(), *d);
  }
  return {};
}

node_actor::behavior_type node(node_actor::stateful_pointer<node_state> self,
                               node_config cfg) {
  self->state.cfg = std::move(cfg);
  return {
    [=](hello_atom, node_hello& h) -> caf::result<node_info> {
      auto& st = self->state;
      auto peer = task_name(h.job, h.index);
      if (auto impostor = unverified_caller(self, peer); !impostor.empty()) {
        // Not the owner's business: an impostor does not end the run.
        std::fprintf(stderr, "syncfac: %s: refused a hello: %s\n",
                     st.cfg.task.str().c_str(), impostor.c_str());
        return make_error(ec::invalid_config, "refused at connect to "
                                                + st.cfg.task.str() + ": "
                                                + impostor);
      }
      auto why = incompatibility("node " + peer, h.protocol, h.message_types,
                                 known_message_types(self->system()));
      if (!why.empty())
        return make_error(ec::bad_message, "refused at connect to "
                                             + st.cfg.task.str() + ": " + why);
      why = configuration_refusal(st.cfg.task, st.cfg.fingerprint, peer,
                                  h.fingerprint, st.cfg.chief);
      if (!why.empty()) {
        // The owner ends its node too: a chief does not wait for a node it
        // refused, and a node does not wait for a chief it refused.
        if (st.cfg.owner)
          caf::anon_send(st.cfg.owner, hello_atom::value, peer, why);
        return make_error(ec::invalid_config, "refused at connect to "
                                                + st.cfg.task.str() + ": "
                                                + why);
      }
      if (h.node)
        st.callers[peer] = h.node;
      if (st.cfg.owner)
        caf::anon_send(st.cfg.owner, hello_atom::value, peer, h.node);
      node_info info;
      info.job = st.cfg.task.job;
      info.index = st.cfg.task.index;
      info.message_types = known_message_types(self->system());
      if (st.cfg.roles)
        for (const auto& kvp : *st.cfg.roles) {
          info.role_names.push_back(kvp.first);
          info.role_actors.push_back(kvp.second);
        }
      info.role_names.emplace_back("node");
      info.role_actors.push_back(caf::actor_cast<caf::actor>(self));
      return info;
    },
    [=](refuse_atom, std::string& peer,
        std::string& why) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (st.cfg.task != st.cfg.chief)
        return make_error(ec::invalid_argument,
                          st.cfg.task.str() + " is not the chief: "
                            + peer + " told it why it cannot join the run");
      // It ends the run: only the task itself may say it (with
      // certificates bound to tasks, as for a hello).
      if (auto impostor = unverified_caller(self, peer); !impostor.empty())
        return make_error(ec::invalid_config, "refused at connect to "
                                                + st.cfg.task.str() + ": "
                                                + impostor);
      if (st.cfg.owner)
        caf::anon_send(st.cfg.owner, refuse_atom::value, std::move(peer),
                       std::move(why));
      return caf::ok_atom::value;
    },
    [=](shutdown_atom, std::string& reason) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (st.cfg.owner && st.cfg.owner_confirms_shutdown)
        return self->delegate(caf::actor_cast<shutdown_handler>(st.cfg.owner),
                              shutdown_atom::value, std::move(reason));
      if (st.cfg.owner)
        caf::anon_send(st.cfg.owner, shutdown_atom::value, reason);
      return caf::ok_atom::value;
    },
    [=](hello_atom) {
      std::vector<std::string> names;
      std::vector<caf::actor> nodes;
      for (const auto& kvp : self->state.callers) {
        names.push_back(kvp.first);
        nodes.push_back(kvp.second);
      }
      return caf::make_result(std::move(names), std::move(nodes));
    },
  };
}

caf::expected<host_port> publish_node(const node_actor& n,
                                      const std::string& host, uint16_t port,
                                      bool tls) {
  auto& sys = n.home_system();
  auto addr = net::bind_address(host);
  if (!addr)
    return addr.error();
  const char* in = addr->c_str();
  auto res = tls ? net::tls_publish(n, port, in, true)
                 : sys.middleman().publish(n, port, in, true);
  if (!res)
    return make_error(ec::io_error,
                      "cannot publish this node on " + *addr + " port "
                        + std::to_string(port) + (tls ? " (TLS)" : "")
                        + (*addr == host ? "" : " (" + host + ")") + ": "
                        + sys.render(res.error())
                        + (net::is_wildcard_address(*addr)
                             ? ""
                             : "; --bind 0.0.0.0 listens on every "
                               "interface where the cluster entry names no "
                               "address of this machine"));
  return host_port{*addr, *res};
}

caf::expected<node_actor> reach_node(caf::actor_system& sys,
                                     caf::scoped_actor& self,
                                     const host_port& addr, bool tls,
                                     std::chrono::milliseconds timeout) {
  auto manager = net::connection_manager(sys, tls);
  if (!manager)
    return manager.error();
  caf::detail::type_list<node_actor> expected_ifs;
  auto ptr = net::remote_actor_via(self, *manager, addr.host, addr.port,
                                   sys.message_types(expected_ifs), timeout);
  if (!ptr) {
    // A refused task hello ends the connection before CAF's handshake,
    // which CAF reports as a lost connection: say what was refused.
    if (tls)
      if (auto why = net::tls_refusal(sys, addr.host, addr.port); !why.empty())
        return make_error(ec::invalid_config, "TLS: " + why);
    return ptr.error();
  }
  return caf::actor_cast<node_actor>(std::move(*ptr));
}

caf::error check_node_answer(const task_id& task, const host_port& addr,
                             const node_info& info,
                             const std::vector<std::string>& mine) {
  auto name = task.str();
  auto why = incompatibility("node " + name + " at " + addr.str(),
                             info.protocol, info.message_types, mine);
  if (!why.empty())
    return make_error(ec::bad_message, "refused at connect: " + why);
  if (info.job != task.job || info.index != task.index)
    return make_error(ec::invalid_config,
                      "expected " + name + " at " + addr.str() + " but found "
                        + task_name(info.job, info.index)
                        + ": do the nodes use the same cluster file?");
  return caf::none;
}

caf::expected<std::map<std::string, node_info>>
connect_nodes(caf::actor_system& sys, caf::scoped_actor& self,
              const cluster_spec& cluster, const std::vector<task_id>& peers,
              const node_hello& hello, const connect_options& opts,
              std::ostream& log) {
  std::vector<std::string> names;
  for (const auto& t : peers)
    names.push_back(t.str());
  auto connector = spawn_peer_connector(sys, cluster, hello, opts, &log);
  // The connector answers by its deadline, once the attempts under way
  // (each bounded by request_timeout) and an abandon question are over.
  auto bound = opts.timeout + 3 * opts.request_timeout;
  caf::expected<std::map<std::string, node_info>> out{caf::error{}};
  self->request(connector, bound, connect_atom::value, names)
    .receive(
      [&](std::vector<node_info>& infos) {
        std::map<std::string, node_info> by_task;
        for (size_t i = 0; i < infos.size() && i < names.size(); ++i)
          by_task.emplace(names[i], std::move(infos[i]));
        out = std::move(by_task);
      },
      [&](caf::error& err) {
        if (err == caf::sec::request_timeout)
          err = make_error(ec::timeout,
                           "the connector to " + std::to_string(names.size())
                             + " peers gave no answer within "
                             + std::to_string(bound.count()) + " ms");
        out = std::move(err);
      });
  self->send_exit(connector, caf::exit_reason::user_shutdown);
  return out;
}

} // namespace syncfac
