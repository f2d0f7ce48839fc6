#pragma once

// Registers every syncfac message type and the syncfac error category with
// an actor system configuration, in one place (CAF 0.17 needs each type
// announced before it can cross a process boundary).

#include <caf/actor_system_config.hpp>

namespace syncfac {

void register_types(caf::actor_system_config& cfg);

} // namespace syncfac
