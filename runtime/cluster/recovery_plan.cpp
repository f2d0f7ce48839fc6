#include "runtime/cluster/recovery_plan.hpp"

#include <algorithm>
#include <ostream>

#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"

namespace syncfac {

namespace {

/// Whether `role` names a PS shard ("ps:1"; actors/role_names.hpp makes
/// these names, and runtime/ does not include actors/).
bool is_shard(const std::string& role) {
  return role.rfind("ps:", 0) == 0;
}

std::string ms(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

} // namespace

const char* to_string(recovery_stage stage) {
  switch (stage) {
    case recovery_stage::running: return "running";
    case recovery_stage::pausing: return "pausing";
    case recovery_stage::finding_checkpoint: return "finding_checkpoint";
    case recovery_stage::awaiting_hosts: return "awaiting_hosts";
    case recovery_stage::probing: return "probing";
    case recovery_stage::asking_step: return "asking_step";
    case recovery_stage::restoring_shards: return "restoring_shards";
    case recovery_stage::restoring_covariance: return "restoring_covariance";
    case recovery_stage::rolling_back: return "rolling_back";
    case recovery_stage::ending_preempted: return "ending_preempted";
    case recovery_stage::ended: return "ended";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& out, recovery_stage stage) {
  return out << to_string(stage);
}

recovery_plan::recovery_plan(recovery_layout layout)
  : layout_(std::move(layout)) {
}

recovery_orders recovery_plan::on(const recovery_input& input) {
  recovery_orders out;
  std::visit([&](const auto& e) { on(e, out); }, input);
  return out;
}

std::string recovery_plan::where(const std::string& task) const {
  auto i = layout_.addresses.find(task);
  return i == layout_.addresses.end() ? task : task + " at " + i->second;
}

bool recovery_plan::recovering() const {
  switch (stage_) {
    case recovery_stage::finding_checkpoint:
    case recovery_stage::awaiting_hosts:
    case recovery_stage::probing:
    case recovery_stage::asking_step:
    case recovery_stage::restoring_shards:
    case recovery_stage::restoring_covariance:
    case recovery_stage::rolling_back:
      return true;
    default:
      return false;
  }
}

bool recovery_plan::shard_lost() const {
  return std::any_of(lost_.begin(), lost_.end(), is_shard);
}

std::string recovery_plan::lost_text(const char* separator) const {
  std::string out;
  for (const auto& r : lost_)
    out += (out.empty() ? "" : separator) + r;
  return out;
}

std::string recovery_plan::hosts_text(bool only_missing) const {
  std::string out;
  for (const auto& h : hosts_) {
    if (only_missing && h.back)
      continue;
    out += (out.empty() ? "" : "; ") + where(h.task) + " (hosting "
           + comma_joined(h.roles) + ")";
  }
  return out;
}

bool recovery_plan::mark_lost(const std::string& role) {
  bool changed = false;
  // A role the probe found frozen is lost again when its link goes down
  // (or the other way round): one loss, in the recovery and in the counts.
  if (std::find(lost_.begin(), lost_.end(), role) == lost_.end()) {
    lost_.push_back(role);
    changed = true;
  }
  auto host = layout_.hosts.find(role);
  if (host == layout_.hosts.end())
    return changed; // begin_attempt ends the run naming it
  auto h = std::find_if(hosts_.begin(), hosts_.end(),
                        [&](const awaited_host& x) {
                          return x.task == host->second;
                        });
  if (h == hosts_.end()) {
    hosts_.push_back(awaited_host{host->second, {role}, false});
    return true;
  }
  if (std::find(h->roles.begin(), h->roles.end(), role) == h->roles.end())
    h->roles.push_back(role);
  // Back already, and lost again (or silent now): awaited again.
  if (h->back) {
    h->back = false;
    changed = true;
  }
  return changed;
}

void recovery_plan::end(recovery_orders& out, caf::error error) {
  stage_ = recovery_stage::ended;
  out.emplace_back(recovery_command::end_run{std::move(error)});
}

void recovery_plan::count_lost() {
  for (const auto& r : lost_)
    (is_shard(r) ? shards_lost_ : kfac_roles_lost_) += 1;
}

void recovery_plan::end_preempted(recovery_orders& out) {
  out.emplace_back(recovery_command::say{
    layout_.me + ": preempted (" + preempted_ + ") while waiting for "
    + lost_text(", ") + "; the run ends without it"});
  // Lost for good: counted as a recovery counts them when they are back.
  count_lost();
  stage_ = recovery_stage::ending_preempted;
  out.emplace_back(recovery_command::end_where_it_stands{preempted_});
}

void recovery_plan::begin_attempt(recovery_orders& out) {
  ++attempt_;
  auto text = lost_text(", then ");
  for (const auto& role : lost_) {
    auto host = layout_.hosts.find(role);
    if (host == layout_.hosts.end())
      return end(out, make_error(ec::peer_lost,
                                 role + " lost, and no task hosts it (an "
                                        "in-process run cannot bring it "
                                        "back)"));
    if (host->second == layout_.me)
      return end(out, make_error(ec::peer_lost,
                                 role + " lost; it is hosted by the chief"));
  }
  // A shard comes back empty: the run rolls back to a checkpoint.
  if (shard_lost() && !layout_.writes_checkpoints)
    return end(out, make_error(ec::peer_lost,
                               text + ", and the run writes no checkpoints "
                                      "to restore it from "
                                      "(--checkpoint_dir)"));
  if (!layout_.has_connector
      && std::any_of(hosts_.begin(), hosts_.end(), [&](const awaited_host& h) {
           return !layout_.passive.count(h.task);
         }))
    return end(out, make_error(ec::peer_lost,
                               text + ", and this node has no connector to "
                                      "reach its host again"));
  if (!checkpoint_) {
    // Once per recovery: no checkpoint is written while the steps are
    // paused (the pause waits for those begun).
    stage_ = recovery_stage::finding_checkpoint;
    out.emplace_back(recovery_command::find_checkpoint{attempt_});
    return;
  }
  await(out);
}

void recovery_plan::await(recovery_orders& out) {
  if (shard_lost() && !*checkpoint_)
    return end(out, make_error(ec::peer_lost,
                               lost_text(", then ")
                                 + ", before the run's first checkpoint: "
                                   "nothing to restore it from"));
  recovery_command::await_hosts wait{attempt_, {}};
  for (const auto& h : hosts_)
    if (!h.back)
      wait.hosts.push_back(h);
  if (wait.hosts.empty()) {
    stage_ = recovery_stage::probing;
    out.emplace_back(recovery_command::probe_roles{attempt_});
    return;
  }
  stage_ = recovery_stage::awaiting_hosts;
  out.emplace_back(recovery_command::say{
    layout_.me + ": waiting up to " + ms(layout_.max_wait) + " for "
    + hosts_text(true) + " to come back"});
  out.emplace_back(std::move(wait));
}

// -- events -------------------------------------------------------------------

void recovery_plan::on(const recovery_event::role_lost& e,
                       recovery_orders& out) {
  switch (stage_) {
    case recovery_stage::ended:
    case recovery_stage::ending_preempted:
      return; // the run is ending: nothing to bring back
    case recovery_stage::running:
      out.emplace_back(recovery_command::say{
        "chief: " + e.role + " lost (" + e.why
        + "); telling the chief to pause the steps"});
      mark_lost(e.role);
      stage_ = recovery_stage::pausing;
      out.emplace_back(recovery_command::pause_chief{e.role});
      return;
    case recovery_stage::pausing:
      if (mark_lost(e.role))
        out.emplace_back(recovery_command::say{"chief: " + e.role
                                               + " lost too (" + e.why + ")"});
      return;
    default:
      // Under way: the attempt is given up (its answers change nothing)
      // and the recovery begins again with the role added, unless the
      // loss is one it knows (a frozen role's link going down after the
      // probe found it).
      if (!mark_lost(e.role))
        return;
      out.emplace_back(recovery_command::say{"chief: " + e.role
                                             + " lost too (" + e.why + ")"});
      begin_attempt(out);
  }
}

void recovery_plan::on(const recovery_event::chief_paused& e,
                       recovery_orders& out) {
  if (stage_ == recovery_stage::running)
    // Paused for a loss its supervisor never reported: nothing to bring
    // back, the run ends with the chief's word.
    return end(out, e.error);
  if (stage_ != recovery_stage::pausing)
    return;
  if (!preempted_.empty())
    return end_preempted(out);
  begin_attempt(out);
}

void recovery_plan::on(const recovery_event::chief_lost& e,
                       recovery_orders& out) {
  // Ending preempted: the chief's answer to the request that ends the run
  // ends it, whatever it is.
  if (stage_ == recovery_stage::ended
      || stage_ == recovery_stage::ending_preempted)
    return;
  if (lost_.empty())
    return end(out, e.error);
  end(out, with_context(e.error, lost_text(", ")));
}

void recovery_plan::on(const recovery_event::preempted& e,
                       recovery_orders& out) {
  switch (stage_) {
    case recovery_stage::ended:
    case recovery_stage::ending_preempted:
      return;
    case recovery_stage::finding_checkpoint:
    case recovery_stage::awaiting_hosts:
      // Nothing restored yet: the run ends where it stands instead of
      // waiting --max_wait_ms for the role.
      preempted_ = e.why;
      return end_preempted(out);
    default:
      // Pausing: acted on once the pause is reported. Running, or a
      // restore under way (stopped halfway, it would leave shards from two
      // steps): the run goes on and the chief, which knows, ends it after
      // its next step; a loss before then ends it where it stands.
      preempted_ = e.why;
  }
}

void recovery_plan::on(const recovery_event::host_back& e,
                       recovery_orders& out) {
  if (!recovering())
    return;
  bool all = true;
  for (auto& h : hosts_) {
    if (h.task == e.task && !h.back) {
      h.back = true;
      out.emplace_back(recovery_command::say{layout_.me + ": " + h.task
                                             + " is back"});
    }
    all = all && h.back;
  }
  if (stage_ == recovery_stage::awaiting_hosts && all) {
    stage_ = recovery_stage::probing;
    out.emplace_back(recovery_command::probe_roles{attempt_});
  }
}

void recovery_plan::on(const recovery_event::wait_expired& e,
                       recovery_orders& out) {
  if (stage_ != recovery_stage::awaiting_hosts || !current(e.attempt))
    return;
  end(out, make_error(ec::timeout, "no word from " + hosts_text(true)
                                     + " within " + ms(layout_.max_wait)
                                     + " (--max_wait_ms) after "
                                     + lost_text(", then ") + " was lost"));
}

void recovery_plan::on(const recovery_event::checkpoint_found& e,
                       recovery_orders& out) {
  if (stage_ != recovery_stage::finding_checkpoint || !current(e.attempt))
    return;
  checkpoint_ = e.checkpoint;
  await(out);
}

void recovery_plan::on(const recovery_event::probed& e,
                       recovery_orders& out) {
  if (stage_ != recovery_stage::probing || !current(e.attempt))
    return;
  if (e.silent.empty()) {
    // The round in flight when the steps paused may have been applied by
    // every shard since: the run stands at the chief's step.
    stage_ = recovery_stage::asking_step;
    out.emplace_back(recovery_command::ask_chief_step{attempt_});
    return;
  }
  auto silent = e.silent;
  std::sort(silent.begin(), silent.end());
  for (const auto& role : silent) {
    out.emplace_back(recovery_command::say{
      "chief: " + role + " does not answer either; waiting for it too"});
    mark_lost(role);
  }
  begin_attempt(out);
}

void recovery_plan::on(const recovery_event::chief_step& e,
                       recovery_orders& out) {
  if (stage_ != recovery_stage::asking_step || !current(e.attempt))
    return;
  paused_step_ = std::max(paused_step_, e.step);
  const auto& from = *checkpoint_;
  if (shard_lost()) {
    restore_step_ = from->global_step;
    stage_ = recovery_stage::restoring_shards;
    out.emplace_back(recovery_command::restore_shards{attempt_, from});
    return;
  }
  restore_step_ = e.step;
  stage_ = recovery_stage::restoring_covariance;
  out.emplace_back(recovery_command::restore_covariance{attempt_, from, false});
}

void recovery_plan::on(const recovery_event::shards_restored& e,
                       recovery_orders& out) {
  if (stage_ != recovery_stage::restoring_shards || !current(e.attempt))
    return;
  // The covariance actors go back to the checkpoint with the shards.
  stage_ = recovery_stage::restoring_covariance;
  out.emplace_back(
    recovery_command::restore_covariance{attempt_, *checkpoint_, true});
}

void recovery_plan::on(const recovery_event::covariance_restored& e,
                       recovery_orders& out) {
  if (stage_ != recovery_stage::restoring_covariance || !current(e.attempt))
    return;
  stage_ = recovery_stage::rolling_back;
  out.emplace_back(recovery_command::roll_back_chief{
    attempt_, restore_step_, *checkpoint_, shard_lost()});
}

void recovery_plan::on(const recovery_event::chief_rolled_back& e,
                       recovery_orders& out) {
  if (stage_ != recovery_stage::rolling_back || !current(e.attempt))
    return;
  bool rolled_back = shard_lost();
  count_lost();
  if (rolled_back)
    rolled_back_steps_ += std::max<int64_t>(0, paused_step_ - restore_step_);
  recovery_command::go_on go{lost_, restore_step_, paused_step_,
                             e.incarnation, rolled_back, *checkpoint_};
  lost_.clear();
  hosts_.clear();
  checkpoint_.reset();
  paused_step_ = -1;
  // No answer of this attempt is awaited any more.
  ++attempt_;
  stage_ = recovery_stage::running;
  out.emplace_back(std::move(go));
}

void recovery_plan::on(const recovery_event::step_failed& e,
                       recovery_orders& out) {
  if (!recovering() || !current(e.attempt))
    return;
  end(out, with_context(e.error, lost_text(", ")));
}

} // namespace syncfac
