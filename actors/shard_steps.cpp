#include "actors/shard_steps.hpp"

#include <algorithm>

#include <caf/sec.hpp>

#include "actors/gather.hpp"
#include "actors/role_names.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

/// "ps:0 at 26, ps:1 at 25".
std::string listing(const std::vector<shard_status>& statuses) {
  std::string all;
  for (size_t i = 0; i < statuses.size(); ++i)
    all += (i == 0 ? "" : ", ") + shard_role(i) + " at "
           + std::to_string(statuses[i].global_step);
  return all;
}

/// Whether `err` is a shard's refusal of an apply it cannot take now: one
/// of the lost chief's is still pending there (it waits for pushes), or
/// the shard is no longer at the step (that apply finished meanwhile).
bool refused_for_now(const caf::error& err) {
  return err.category() == error_category
         && err.code() == static_cast<uint8_t>(ec::invalid_argument);
}

/// Waits for shard `i` to reach `step` through the apply the lost chief
/// asked for: a pull for that step is answered once the shard is there.
caf::error await_step(caf::scoped_actor& self, const ps_actor& shard,
                      size_t i, int64_t step,
                      std::chrono::milliseconds wait) {
  caf::error err;
  self
    ->request(shard, wait + std::chrono::seconds(5), pull_atom::value, step,
              static_cast<int64_t>(wait.count()))
    .receive(
      [&](shard_params& p) {
        if (!p.has_values)
          err = make_error(ec::timeout,
                           shard_role(i) + " did not reach global step "
                             + std::to_string(step) + " within "
                             + std::to_string(wait.count())
                             + " ms (its apply waits for the workers' "
                               "pushes of the round)");
      },
      [&](caf::error& e) {
        err = with_context(e, "waiting for " + shard_role(i)
                                + " to reach global step "
                                + std::to_string(step));
      });
  return err;
}

} // namespace

caf::expected<shard_steps>
find_shard_steps(caf::scoped_actor& self, const std::vector<ps_actor>& shards,
                 const shard_step_waits& waits,
                 const std::function<void(const std::string&)>& note) {
  std::vector<shard_status> statuses(shards.size());
  caf::error err;
  ask_each<shard_status>(
    self, shards, waits.request_timeout,
    [&](size_t i, shard_status& ss) { statuses[i] = std::move(ss); },
    [&](size_t i, const caf::error& e) {
      if (!err)
        err = make_error(ec::peer_down,
                         "status of " + shard_role(i) + ": " + render(e));
    },
    status_atom::value);
  if (err)
    return err;
  shard_steps result;
  if (statuses.empty())
    return result;
  auto by_step = [](const shard_status& a, const shard_status& b) {
    return a.global_step < b.global_step;
  };
  auto lo = std::min_element(statuses.begin(), statuses.end(), by_step)
              ->global_step;
  auto hi = std::max_element(statuses.begin(), statuses.end(), by_step)
              ->global_step;
  if (hi == 0)
    return result;
  if (lo == hi) {
    result.step = hi;
    return result;
  }
  // The round to finish is the one an ahead shard applied last: a shard
  // restored or set to its step (not applied to it) says nothing of it.
  auto ahead = std::find_if(statuses.begin(), statuses.end(),
                            [hi](const shard_status& ss) {
                              return ss.global_step == hi
                                     && ss.last_applied_step == hi;
                            });
  if (hi != lo + 1 || ahead == statuses.end()) {
    result.disagreement = listing(statuses);
    return result;
  }
  auto scale = gradient_scale{ahead->last_gradient_scale};
  std::vector<ps_actor> lagging(shards.size());
  std::string names;
  for (size_t i = 0; i < shards.size(); ++i)
    if (statuses[i].global_step == lo) {
      lagging[i] = shards[i];
      names += (names.empty() ? "" : ", ") + shard_role(i);
    }
  note("chief: the PS shards disagree on the global step ("
       + listing(statuses) + "): the chief that went away applied the round "
       + "of global step " + std::to_string(lo) + " on some shards only; "
       + "completing it on " + names + " with the gradients they hold");
  std::vector<std::pair<size_t, caf::error>> refused;
  ask_each<applied>(
    self, lagging, waits.step_timeout,
    [&](size_t i, const applied&) { result.completed.push_back(i); },
    [&](size_t i, caf::error& e) { refused.emplace_back(i, std::move(e)); },
    apply_atom::value, lo, waits.replicas_to_aggregate, scale);
  for (auto& [i, e] : refused) {
    auto what = shard_role(i) + ": completing the round of global step "
                + std::to_string(lo) + " a lost chief applied on some "
                + "shards only";
    if (e == caf::sec::request_timeout)
      return make_error(ec::timeout,
                        what + ": no answer within "
                          + std::to_string(waits.step_timeout.count())
                          + " ms (its apply waits for "
                          + std::to_string(waits.replicas_to_aggregate)
                          + " fresh pushes of the round from the workers)");
    if (!refused_for_now(e))
      return with_context(e, what);
    if (auto late = await_step(self, shards[i], i, hi, waits.step_timeout))
      return with_context(late, what + " (" + render(e) + ")");
    note("chief: " + shard_role(i) + " reached global step "
         + std::to_string(hi) + " through the lost chief's own apply");
  }
  result.step = hi;
  return result;
}

} // namespace syncfac
