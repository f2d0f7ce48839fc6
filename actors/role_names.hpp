#pragma once

// The names roles go by in logs, losses and the cluster's hellos
// ("ps:1"), declared once: the chief, its supervisor and driver, and the
// in-process trainer name the PS shards the same way.

#include <cstddef>
#include <string>

namespace syncfac {

/// "ps:<index>".
inline std::string shard_role(size_t index) {
  return "ps:" + std::to_string(index);
}

/// Whether a role name (as shard_role makes) names a PS shard.
inline bool is_shard_role(const std::string& role) {
  return role.rfind("ps:", 0) == 0;
}

} // namespace syncfac
