#pragma once

// How every role with a config is spawned: the config's validate() first,
// so that a bad config is refused by name (ec::invalid_config) before an
// actor exists, then the event-based actor on the config.

#include <utility>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/infer_handle.hpp>

namespace syncfac {

/// `role`'s actor on `cfg`, or what cfg.validate() found wrong.
template <class Role, class Config>
caf::expected<caf::infer_handle_from_fun_t<Role>>
spawn_validated(caf::actor_system& sys, Role role, Config cfg) {
  if (auto err = cfg.validate())
    return err;
  return sys.spawn(role, std::move(cfg));
}

} // namespace syncfac
