#include "actors/node_connector.hpp"

#include <ostream>

#include <caf/scoped_actor.hpp>

namespace syncfac {

connector_actor spawn_node_connector(caf::actor_system& sys,
                                     cluster_spec cluster, node_hello hello,
                                     connect_options opts) {
  auto impl = [cluster, hello, opts](connector_actor::pointer self)
    -> connector_actor::behavior_type {
    return {
      [=](connect_atom, const std::string& task) -> caf::result<node_info> {
        auto t = task_id::parse(task);
        if (!t)
          return t.error();
        // A hello sent while the task was frozen is lost when it thaws
        // (its middleman drops the connections it timed out): ask again
        // soon, and keep the waiting quiet (the supervisor logs).
        auto o = opts;
        o.request_timeout = std::min(o.request_timeout,
                                     std::chrono::milliseconds{2000});
        o.report_every = std::chrono::hours{1};
        std::ostream quiet{nullptr};
        caf::scoped_actor io{self->system()};
        auto infos = connect_nodes(self->system(), io, cluster, {*t}, hello,
                                   o, quiet);
        if (!infos)
          return infos.error();
        auto i = infos->find(task);
        if (i == infos->end())
          return make_error(ec::internal, "connected, but no answer of "
                                            + task);
        return std::move(i->second);
      },
    };
  };
  return sys.spawn<caf::detached>(impl);
}

} // namespace syncfac
