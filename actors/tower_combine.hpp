#pragma once

// How the tower device (actors/tower_device.hpp) combines its towers'
// answers into the answer of one device: gradients and losses weighted by
// the examples, sparse rows merged by index, K-FAC statistics averaged.
// Pure functions, used by the actor and tested without one; an answer
// that does not fit the others is refused with an error naming the tower
// ("tower k of N") and the request.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/tower_split.hpp"
#include "messages/device_messages.hpp"
#include "messages/sync_messages.hpp"

namespace syncfac::tower {

/// "tower device: tower k of N": how errors name a tower.
std::string who(size_t k, size_t towers);

/// A malformed answer of tower k of `towers` (replicas that disagree, a
/// count other than the examples sent): ec::bad_message naming the tower
/// and the request `what`.
caf::error bad_answer(size_t k, size_t towers, const std::string& what,
                      const std::string& why);

/// Σ_k w_k x_k over the statistics of the towers `which` (of `towers`),
/// w_k their examples over the sum; every tower must report the same
/// layers with the same shapes, in the same order.
caf::expected<std::vector<layer_stats>>
combine_stats(size_t towers, const std::string& what,
              const std::vector<size_t>& which,
              std::vector<std::vector<layer_stats>*> stats,
              const std::vector<int64_t>& examples);

/// The statistics updates of the towers `which` (of `towers`) as one: the
/// layers combined as combine_stats does, the examples summed, the worker
/// and step the first's.
caf::expected<stats_update>
combine_stats_updates(size_t towers, const std::string& what,
                      const std::vector<size_t>& which,
                      std::vector<stats_update>& us);

/// The batch's step_result from the answers of the towers of `plan` (of
/// `towers`), in its order (actors/tower_device.hpp says how).
caf::expected<step_result> combine_steps(size_t towers,
                                         const std::string& what,
                                         const split_plan& plan,
                                         std::vector<step_result>& rs);

} // namespace syncfac::tower
