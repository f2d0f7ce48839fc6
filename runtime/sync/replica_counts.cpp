#include "runtime/sync/replica_counts.hpp"

#include <string>

#include "runtime/base/error.hpp"

namespace syncfac {

int32_t kfac_gradient_tasks(int32_t workers) {
  // ceil(0.6 N) in integers: 0.6 N is not exact in binary floating point.
  return static_cast<int32_t>((int64_t{workers} * 3 + 4) / 5);
}

caf::expected<replica_counts> resolve_replica_counts(int32_t workers,
                                                     int32_t replicas_to_aggregate,
                                                     bool kfac) {
  auto bad = [](const char* flag, int32_t value) {
    return make_error(ec::invalid_config,
                      std::string{"--"} + flag + " must be at least 1 (or 0: "
                        + "the default), got " + std::to_string(value));
  };
  if (workers < 0)
    return bad("worker_replicas", workers);
  if (replicas_to_aggregate < 0)
    return bad("replicas_to_aggregate", replicas_to_aggregate);
  replica_counts out;
  out.workers = workers > 0 ? workers
                : replicas_to_aggregate > 0 ? replicas_to_aggregate
                                            : 1;
  if (replicas_to_aggregate > 0)
    out.replicas_to_aggregate = replicas_to_aggregate;
  else
    out.replicas_to_aggregate = kfac ? kfac_gradient_tasks(out.workers)
                                     : out.workers;
  return out;
}

} // namespace syncfac
