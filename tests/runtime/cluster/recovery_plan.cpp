#define BOOST_TEST_MODULE recovery_plan
#include <boost/test/unit_test.hpp>

// The recovery plan (runtime/cluster/recovery_plan.hpp) without an actor.
// A scripted world answers every command as the chief, the roles and
// their hosts would, one answer at a time (the chief acts on a command
// when it gets it, its answer comes later), and the cases put other
// events between any two answers of a recovery: a second and a third
// loss, the role being restored lost again, a role silent at the probe,
// the chief lost, a preemption, a wait that runs out, a failed step, and
// every answer of an attempt given up. After every event the invariants
// of a recovery hold (world::deliver):
//
//   - the run goes on only once every role lost is back and was restored
//     by one attempt begun after the last loss: its probe, the chief's
//     step, the shards (a shard lost), the covariance actors and the
//     chief's rollback, in that order, none of them before that loss;
//   - the roles a recovery brings back are every role lost since the run
//     last went on, and it rolls back exactly when a shard is among them;
//   - the chief is told to pause only while its steps run and rolled back
//     only while they do not;
//   - an answer of an attempt given up changes nothing;
//   - nothing is done once the run ends; losses alone never end it;
//   - the steps the plan says were thrown away are the chief's own count.

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/cluster/recovery_plan.hpp"

using namespace syncfac;
namespace ev = syncfac::recovery_event;
namespace cmd = syncfac::recovery_command;

namespace {

const std::vector<std::string> every_role{"ps:0", "ps:1", "covariance:0",
                                          "inverse:0"};

/// Each role on a task of its own name; the worker connects to the chief.
recovery_layout layout() {
  recovery_layout l;
  l.me = "chief:0";
  for (const auto& r : every_role) {
    l.hosts[r] = r;
    l.addresses[r] = "127.0.0.1:400" + std::to_string(l.addresses.size() + 1);
  }
  l.passive = {"worker:0"};
  l.has_connector = true;
  l.writes_checkpoints = true;
  l.max_wait = std::chrono::milliseconds{10000};
  return l;
}

std::shared_ptr<const restored_run> checkpoint_at(int64_t step) {
  auto r = std::make_shared<restored_run>();
  r->global_step = step;
  r->path = "ckpt-" + std::to_string(step);
  return r;
}

bool is_shard(const std::string& role) {
  return role.rfind("ps:", 0) == 0;
}

std::string name_of(const recovery_input& in) {
  return std::visit(
    [](const auto& e) -> std::string {
      using T = std::decay_t<decltype(e)>;
      if constexpr (std::is_same_v<T, ev::role_lost>)
        return "role_lost " + e.role;
      else if constexpr (std::is_same_v<T, ev::chief_paused>)
        return "chief_paused";
      else if constexpr (std::is_same_v<T, ev::chief_lost>)
        return "chief_lost";
      else if constexpr (std::is_same_v<T, ev::preempted>)
        return "preempted";
      else if constexpr (std::is_same_v<T, ev::host_back>)
        return "host_back " + e.task;
      else if constexpr (std::is_same_v<T, ev::wait_expired>)
        return "wait_expired #" + std::to_string(e.attempt);
      else if constexpr (std::is_same_v<T, ev::checkpoint_found>)
        return "checkpoint_found #" + std::to_string(e.attempt);
      else if constexpr (std::is_same_v<T, ev::probed>)
        return "probed #" + std::to_string(e.attempt) + " ("
               + std::to_string(e.silent.size()) + " silent)";
      else if constexpr (std::is_same_v<T, ev::chief_step>)
        return "chief_step #" + std::to_string(e.attempt) + " "
               + std::to_string(e.step);
      else if constexpr (std::is_same_v<T, ev::shards_restored>)
        return "shards_restored #" + std::to_string(e.attempt);
      else if constexpr (std::is_same_v<T, ev::covariance_restored>)
        return "covariance_restored #" + std::to_string(e.attempt);
      else if constexpr (std::is_same_v<T, ev::chief_rolled_back>)
        return "chief_rolled_back #" + std::to_string(e.attempt);
      else
        return "step_failed #" + std::to_string(e.attempt);
    },
    in);
}

template <class T, class = void>
struct has_attempt : std::false_type {};

template <class T>
struct has_attempt<T, std::void_t<decltype(std::declval<T>().attempt)>>
  : std::true_type {};

/// The attempt a command belongs to (0: none).
uint64_t attempt_of(const recovery_order& o) {
  return std::visit(
    [](const auto& c) -> uint64_t {
      if constexpr (has_attempt<std::decay_t<decltype(c)>>::value)
        return c.attempt;
      else
        return 0;
    },
    o);
}

template <class T>
const T* find_order(const recovery_orders& orders) {
  for (const auto& o : orders)
    if (auto* x = std::get_if<T>(&o))
      return x;
  return nullptr;
}

/// The chief, the roles and their hosts around one plan.
struct world {
  recovery_plan plan{layout()};
  std::deque<recovery_input> pending;
  std::shared_ptr<const restored_run> newest = checkpoint_at(20);
  int64_t chief_step = 25;
  int64_t incarnation = 0;
  bool chief_running = true;
  /// The steps the chief threw away, as it counts them.
  int64_t chief_rolled_back = 0;
  /// Roles that leave the next probe unanswered.
  std::set<std::string> frozen;

  /// Events delivered so far, and the trace the invariants read.
  int64_t clock = 0;
  /// Since the run last went on: each lost role's latest loss, and each
  /// host's latest return (both as event numbers).
  std::map<std::string, int64_t> lost_at;
  std::map<std::string, int64_t> back_at;
  struct issued {
    int64_t at;
    recovery_order order;
  };
  std::vector<issued> since_go_on;
  int go_ons = 0;
  bool ended = false;
  bool ended_preempted = false;
  caf::error end_error;
  std::vector<std::string> history;

  std::string trace() const {
    std::ostringstream out;
    for (const auto& h : history)
      out << "\n  " << h;
    return out.str();
  }

  void check(bool ok, const std::string& what) {
    if (!ok)
      BOOST_ERROR(what << "; events:" << trace());
  }

  /// Steps until the plan is at `stage`; each step must make progress.
  void step_until(recovery_stage stage) {
    while (plan.stage() != stage)
      BOOST_REQUIRE(step());
  }

  /// `role`'s process goes away: its host is down until it is awaited
  /// (and then at once back), so a return queued before counts no more.
  void lose(const std::string& role) {
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [&](const recovery_input& in) {
                                   auto* b = std::get_if<ev::host_back>(&in);
                                   return b && b->task == role;
                                 }),
                  pending.end());
    lost_at[role] = clock + 1;
    deliver(ev::role_lost{role, "killed"});
    // Awaited still (a loss the plan knew): its connector keeps trying,
    // and reaches the task once it has restarted.
    for (const auto& h : plan.hosts())
      if (h.task == role && !h.back
          && plan.stage() == recovery_stage::awaiting_hosts)
        pending.push_back(ev::host_back{role});
  }

  /// Delivers `in` to the plan, checks the invariants and carries out
  /// the commands; answers the orders.
  recovery_orders deliver(const recovery_input& in) {
    ++clock;
    auto before = plan.stage();
    if (auto* p = std::get_if<ev::probed>(&in);
        p && p->attempt == plan.attempt()
        && before == recovery_stage::probing)
      for (const auto& r : p->silent) {
        lost_at[r] = clock;
        back_at.erase(r);
      }
    if (auto* b = std::get_if<ev::host_back>(&in)) {
      // Its first return since its loss (a repeated one says nothing new).
      auto l = lost_at.find(b->task);
      auto was = back_at.find(b->task);
      if (l != lost_at.end() && (was == back_at.end() || was->second < l->second))
        back_at[b->task] = clock;
    }
    auto orders = plan.on(in);
    std::string line = "#" + std::to_string(clock) + " " + name_of(in) + " ["
                       + to_string(before) + "] ->";
    for (const auto& o : orders)
      line += " " + std::to_string(o.index());
    history.push_back(line);
    if (before == recovery_stage::ended
        || before == recovery_stage::ending_preempted)
      check(orders.empty(), "a command after the run ended");
    for (const auto& o : orders)
      carry_out(o);
    return orders;
  }

  void carry_out(const recovery_order& o) {
    since_go_on.push_back(issued{clock, o});
    if (auto* c = std::get_if<cmd::pause_chief>(&o)) {
      check(chief_running, "the chief told to pause " + c->role
                             + " while its steps do not run");
      chief_running = false;
      pending.push_back(ev::chief_paused{
        make_error(ec::peer_lost, c->role + " lost at global step "
                                    + std::to_string(chief_step))});
    } else if (auto* c = std::get_if<cmd::find_checkpoint>(&o)) {
      pending.push_back(ev::checkpoint_found{c->attempt, newest});
    } else if (auto* c = std::get_if<cmd::await_hosts>(&o)) {
      std::set<std::string> awaited;
      for (const auto& h : c->hosts) {
        check(!h.back, "an awaited host that is back");
        awaited.insert(h.task);
        pending.push_back(ev::host_back{h.task});
      }
      // Exactly the hosts of the roles lost that are not back.
      std::set<std::string> missing;
      for (const auto& [role, at] : lost_at) {
        auto b = back_at.find(role);
        if (b == back_at.end() || b->second < at)
          missing.insert(role);
      }
      check(awaited == missing, "awaited hosts are not the missing ones");
    } else if (auto* c = std::get_if<cmd::probe_roles>(&o)) {
      pending.push_back(ev::probed{
        c->attempt, std::vector<std::string>(frozen.begin(), frozen.end())});
      frozen.clear();
    } else if (auto* c = std::get_if<cmd::ask_chief_step>(&o)) {
      check(!chief_running, "the chief asked for its paused step while "
                            "running");
      pending.push_back(ev::chief_step{c->attempt, chief_step});
    } else if (auto* c = std::get_if<cmd::restore_shards>(&o)) {
      check(c->from == newest, "shards restored from another checkpoint");
      pending.push_back(ev::shards_restored{c->attempt});
    } else if (auto* c = std::get_if<cmd::restore_covariance>(&o)) {
      pending.push_back(ev::covariance_restored{c->attempt});
    } else if (auto* c = std::get_if<cmd::roll_back_chief>(&o)) {
      // The real chief refuses a rollback while its steps run.
      check(!chief_running, "the chief rolled back while running");
      chief_rolled_back += chief_step - c->step;
      chief_step = c->step;
      pending.push_back(ev::chief_rolled_back{c->attempt, ++incarnation});
    } else if (auto* c = std::get_if<cmd::go_on>(&o)) {
      check_go_on(*c);
    } else if (std::get_if<cmd::end_where_it_stands>(&o)) {
      check(!ended_preempted, "ended preempted twice");
      ended_preempted = true;
    } else if (auto* c = std::get_if<cmd::end_run>(&o)) {
      ended = true;
      end_error = c->error;
      check(static_cast<bool>(c->error), "a run ended without an error");
    }
  }

  /// The first command of `attempt` of kind T since the run last went on,
  /// and where it was issued (-1: none).
  template <class T>
  int64_t issued_at(uint64_t attempt) const {
    for (const auto& i : since_go_on)
      if (std::holds_alternative<T>(i.order) && attempt_of(i.order) == attempt)
        return i.at;
    return -1;
  }

  void check_go_on(const cmd::go_on& g) {
    ++go_ons;
    check(!ended && !ended_preempted, "went on after the run ended");
    int64_t last_loss = 0;
    bool shard = false;
    for (const auto& [role, at] : lost_at) {
      last_loss = std::max(last_loss, at);
      shard = shard || is_shard(role);
      check(std::find(g.lost.begin(), g.lost.end(), role) != g.lost.end(),
            "went on without " + role + " among the roles brought back");
      auto b = back_at.find(role);
      check(b != back_at.end() && b->second > at,
            "went on before the host of " + role + " was back");
    }
    check(g.lost.size() == lost_at.size(),
          "went on naming a role never lost");
    check(g.rolled_back == shard, "rolled back without a shard lost, or "
                                  "went on without rolling a lost shard "
                                  "back");
    if (shard)
      check(g.step == newest->global_step, "rolled back to another step");
    // The attempt that restored: every step of its own, in order, begun
    // after the last loss and after every host was back.
    uint64_t a = 0;
    for (const auto& i : since_go_on)
      if (std::holds_alternative<cmd::roll_back_chief>(i.order))
        a = attempt_of(i.order);
    auto probe = issued_at<cmd::probe_roles>(a);
    auto step = issued_at<cmd::ask_chief_step>(a);
    auto shards = issued_at<cmd::restore_shards>(a);
    auto cov = issued_at<cmd::restore_covariance>(a);
    auto rollback = issued_at<cmd::roll_back_chief>(a);
    check(probe > last_loss, "went on with a restore begun before the last "
                             "loss (attempt " + std::to_string(a) + ")");
    for (const auto& [host, at] : back_at)
      if (lost_at.count(host))
        check(probe >= at, "probed before " + host + " was back");
    check(probe < step, "the chief's step asked before the probe");
    if (shard)
      check(step < shards && shards < cov, "shards not restored in order");
    else
      check(shards < 0, "shards restored without a shard lost");
    check(step < cov && cov < rollback, "restore steps out of order");
    check(!chief_running, "went on with the chief running");
    chief_running = true;
    chief_step += 5; // the steps run on until the next loss
    lost_at.clear();
    back_at.clear();
    since_go_on.clear();
  }

  /// Delivers the next answer; false when none is left.
  bool step() {
    if (pending.empty())
      return false;
    auto in = pending.front();
    pending.pop_front();
    deliver(in);
    return true;
  }

  void settle() {
    for (int i = 0; i < 1000 && step(); ++i)
      ;
    check(pending.empty(), "the answers never settled");
  }

  /// Every answer of every attempt before the current one changes
  /// nothing: no command, the same stage, attempt and lost roles.
  void deliver_old_answers() {
    for (uint64_t a = 0; a < plan.attempt(); ++a) {
      std::vector<recovery_input> old{
        ev::wait_expired{a},
        ev::checkpoint_found{a, nullptr},
        ev::probed{a, {"inverse:0"}},
        ev::chief_step{a, 99},
        ev::shards_restored{a},
        ev::covariance_restored{a},
        ev::chief_rolled_back{a, 77},
        ev::step_failed{a, make_error(ec::peer_down, "old")},
      };
      for (const auto& in : old) {
        auto stage = plan.stage();
        auto attempt = plan.attempt();
        auto lost = plan.lost();
        auto orders = deliver(in);
        check(orders.empty() && stage == plan.stage()
                && attempt == plan.attempt() && lost == plan.lost(),
              "an answer of an attempt given up (" + name_of(in)
                + ") changed the plan");
      }
    }
  }

  /// The end: the run goes on with nothing lost, or it ended.
  void check_end(bool may_end, bool may_end_preempted) {
    if (ended) {
      check(may_end, "the run ended: " + render(end_error));
      check(plan.stage() == recovery_stage::ended, "ended, but the plan "
                                                   "is not");
      return;
    }
    if (ended_preempted) {
      check(may_end_preempted, "ended preempted without a preemption");
      check(plan.stage() == recovery_stage::ending_preempted,
            "ended preempted, but the plan is not");
      return;
    }
    check(plan.stage() == recovery_stage::running,
          std::string{"left in "} + to_string(plan.stage()));
    check(lost_at.empty() && plan.lost().empty(),
          "running with a role lost");
    check(chief_running, "the plan runs, the chief does not");
    check(plan.rolled_back_steps() == chief_rolled_back,
          "the plan threw away " + std::to_string(plan.rolled_back_steps())
            + " steps, the chief " + std::to_string(chief_rolled_back));
  }
};

/// An event put between two answers, by name.
struct disturbance {
  std::string name;
  std::function<void(world&)> apply;
  /// It may end the run (else: losses alone never do).
  bool ends = false;
  bool preempts = false;
};

disturbance lose(const std::string& role) {
  return {"lose " + role, [role](world& w) { w.lose(role); }};
}

std::vector<disturbance> losses() {
  std::vector<disturbance> out;
  for (const auto& r : every_role)
    out.push_back(lose(r));
  out.push_back({"freeze inverse:0",
                 [](world& w) { w.frozen.insert("inverse:0"); }});
  return out;
}

std::vector<disturbance> every_disturbance() {
  auto out = losses();
  out.push_back({"chief lost",
                 [](world& w) {
                   auto done = w.plan.stage() == recovery_stage::ended
                               || w.plan.stage()
                                    == recovery_stage::ending_preempted;
                   auto orders = w.deliver(ev::chief_lost{
                     make_error(ec::peer_down, "the chief went away")});
                   if (!done)
                     w.check(find_order<cmd::end_run>(orders) != nullptr,
                             "the chief lost, and the run went on");
                 },
                 true});
  out.push_back(
    {"preempted",
     [](world& w) {
       auto stage = w.plan.stage();
       auto orders = w.deliver(ev::preempted{"SIGTERM"});
       if (stage == recovery_stage::finding_checkpoint
           || stage == recovery_stage::awaiting_hosts)
         w.check(find_order<cmd::end_where_it_stands>(orders) != nullptr,
                 "preempted while awaiting a host, and the run waits on");
     },
     false, true});
  out.push_back({"wait expired",
                 [](world& w) {
                   w.deliver(ev::wait_expired{w.plan.attempt()});
                 },
                 true});
  out.push_back({"step failed",
                 [](world& w) {
                   w.deliver(ev::step_failed{
                     w.plan.attempt(),
                     make_error(ec::peer_down, "restore of ps:0: gone")});
                 },
                 true});
  out.push_back({"old answers", [](world& w) { w.deliver_old_answers(); }});
  return out;
}

/// A recovery from the loss of `first`, with `plan` of disturbances: each
/// (after, what) puts `what` after `after` more answers.
void recover(const std::string& first,
             const std::vector<std::pair<int, disturbance>>& plan) {
  world w;
  w.lose(first);
  bool may_end = false;
  bool may_end_preempted = false;
  std::string named = "first " + first;
  for (const auto& [after, what] : plan) {
    for (int i = 0; i < after; ++i)
      w.step();
    named += ", " + std::to_string(after) + " answers, " + what.name;
    w.history.push_back("-- " + what.name);
    what.apply(w);
    may_end = may_end || what.ends;
    may_end_preempted = may_end_preempted || what.preempts;
  }
  w.settle();
  BOOST_TEST_CONTEXT(named) {
    w.check_end(may_end, may_end_preempted);
  }
}

/// How many answers an undisturbed recovery from the loss of `first`
/// takes until the run goes on.
int answers_of_a_recovery(const std::string& first) {
  world w;
  w.lose(first);
  int n = 0;
  while (w.go_ons == 0 && w.step())
    ++n;
  BOOST_REQUIRE_EQUAL(w.go_ons, 1);
  return n;
}

const std::vector<std::string> first_losses{"ps:1", "covariance:0"};

} // namespace

BOOST_AUTO_TEST_SUITE(one_recovery)

BOOST_AUTO_TEST_CASE(a_lost_shard_rolls_back_to_the_checkpoint) {
  world w;
  auto orders = w.deliver(ev::role_lost{"ps:1", "killed"});
  BOOST_TEST(w.plan.stage() == recovery_stage::pausing);
  BOOST_REQUIRE(find_order<cmd::pause_chief>(orders));
  w.lost_at["ps:1"] = 1;
  w.settle();
  BOOST_TEST(w.go_ons == 1);
  w.check_end(false, false);
  BOOST_TEST(w.plan.shards_lost() == 1);
  BOOST_TEST(w.plan.rolled_back_steps() == 5);
  BOOST_TEST(w.chief_step == 25); // back at 20, and 5 steps on
}

BOOST_AUTO_TEST_CASE(a_lost_covariance_actor_goes_on_from_the_chiefs_step) {
  world w;
  w.lose("covariance:0");
  w.settle();
  BOOST_TEST(w.go_ons == 1);
  w.check_end(false, false);
  BOOST_TEST(w.plan.kfac_roles_lost() == 1);
  BOOST_TEST(w.plan.rolled_back_steps() == 0);
}

BOOST_AUTO_TEST_CASE(a_restore_chain_given_up_never_reaches_go_on) {
  // The bug this plan removes: a second shard lost while the first one's
  // restore is in flight; the chain's remaining answers arrive and must
  // not take the run back to running.
  world w;
  w.lose("ps:1");
  w.step_until(recovery_stage::restoring_shards);
  auto old = w.plan.attempt();
  w.lose("ps:0");
  BOOST_TEST(w.plan.stage() == recovery_stage::awaiting_hosts);
  for (recovery_input in :
       {recovery_input{ev::shards_restored{old}},
        recovery_input{ev::covariance_restored{old}},
        recovery_input{ev::chief_rolled_back{old, 9}}})
    BOOST_TEST(w.plan.on(in).empty());
  BOOST_TEST(w.plan.stage() == recovery_stage::awaiting_hosts);
  BOOST_TEST((w.plan.lost() == std::vector<std::string>{"ps:1", "ps:0"}));
  w.settle();
  w.check_end(false, false);
  BOOST_TEST(w.plan.shards_lost() == 2);
}

BOOST_AUTO_TEST_CASE(the_chief_lost_during_a_shards_restore_ends_the_run) {
  world w;
  w.lose("ps:1");
  w.step_until(recovery_stage::restoring_shards);
  auto orders
    = w.deliver(ev::chief_lost{make_error(ec::peer_down, "chief: gone")});
  auto* end = find_order<cmd::end_run>(orders);
  BOOST_REQUIRE(end);
  BOOST_TEST(render(end->error).find("ps:1") != std::string::npos,
             render(end->error));
  w.settle();
  BOOST_TEST(w.go_ons == 0);
  BOOST_TEST(w.plan.stage() == recovery_stage::ended);
}

BOOST_AUTO_TEST_CASE(a_wait_that_runs_out_names_whom_it_waited_for) {
  world w;
  w.lose("ps:1");
  w.step(); // paused
  w.step(); // the checkpoint
  BOOST_REQUIRE(w.plan.stage() == recovery_stage::awaiting_hosts);
  auto orders = w.deliver(ev::wait_expired{w.plan.attempt()});
  auto* end = find_order<cmd::end_run>(orders);
  BOOST_REQUIRE(end);
  BOOST_TEST(end->error.code() == static_cast<uint8_t>(ec::timeout));
  BOOST_TEST(render(end->error).find("no word from ps:1 at 127.0.0.1:4002 "
                                     "(hosting ps:1) within 10000 ms "
                                     "(--max_wait_ms) after ps:1 was lost")
               != std::string::npos,
             render(end->error));
}

BOOST_AUTO_TEST_CASE(a_shard_lost_without_a_checkpoint_ends_naming_why) {
  world w;
  w.newest = nullptr;
  w.lose("ps:1");
  w.settle();
  BOOST_REQUIRE(w.ended);
  BOOST_TEST(render(w.end_error).find("before the run's first checkpoint")
               != std::string::npos,
             render(w.end_error));
  // A K-FAC role needs none.
  world k;
  k.newest = nullptr;
  k.lose("inverse:0");
  k.settle();
  k.check_end(false, false);
}

BOOST_AUTO_TEST_CASE(layouts_that_cannot_bring_a_role_back_end_the_run) {
  auto ends_with = [](recovery_layout l, const std::string& role,
                      const std::string& part) {
    recovery_plan plan{std::move(l)};
    plan.on(ev::role_lost{role, "killed"});
    auto orders = plan.on(ev::chief_paused{make_error(ec::peer_lost, "x")});
    auto* end = find_order<cmd::end_run>(orders);
    BOOST_REQUIRE(end);
    BOOST_TEST(end->error.code() == static_cast<uint8_t>(ec::peer_lost));
    BOOST_TEST(render(end->error).find(part) != std::string::npos,
               render(end->error));
  };
  ends_with(recovery_layout{}, "ps:0",
            "ps:0 lost, and no task hosts it (an in-process run");
  auto l = layout();
  l.hosts["inverse:0"] = "chief:0";
  ends_with(l, "inverse:0", "inverse:0 lost; it is hosted by the chief");
  l = layout();
  l.writes_checkpoints = false;
  ends_with(l, "ps:0", "ps:0, and the run writes no checkpoints to restore "
                       "it from (--checkpoint_dir)");
  l = layout();
  l.has_connector = false;
  ends_with(l, "covariance:0", "no connector to reach its host again");
}

BOOST_AUTO_TEST_CASE(a_preemption_while_paused_ends_the_run_where_it_stands) {
  world w;
  w.deliver(ev::role_lost{"ps:1", "killed"});
  w.deliver(ev::preempted{"SIGTERM"});
  BOOST_TEST(w.plan.stage() == recovery_stage::pausing);
  w.settle();
  BOOST_TEST(w.ended_preempted);
  BOOST_TEST(w.plan.shards_lost() == 1); // lost for good
  BOOST_TEST(w.go_ons == 0);
}

BOOST_AUTO_TEST_CASE(a_silent_role_at_the_probe_is_awaited_too) {
  world w;
  w.frozen.insert("inverse:0");
  w.lose("ps:1");
  w.settle();
  w.check_end(false, false);
  BOOST_TEST(w.plan.shards_lost() == 1);
  BOOST_TEST(w.plan.kfac_roles_lost() == 1);
}

BOOST_AUTO_TEST_SUITE_END()

// -- every order ---------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(every_order)

BOOST_AUTO_TEST_CASE(one_event_at_every_step_of_a_recovery) {
  for (const auto& first : first_losses)
    for (int at = 0; at <= answers_of_a_recovery(first) + 1; ++at)
      for (const auto& d : every_disturbance())
        recover(first, {{at, d}});
}

BOOST_AUTO_TEST_CASE(every_pair_of_events_at_every_step_of_a_recovery) {
  auto all = every_disturbance();
  for (const auto& first : first_losses)
    for (int at = 0; at <= answers_of_a_recovery(first) + 1; ++at)
      for (const auto& a : all)
        for (const auto& b : all)
          recover(first, {{at, a}, {0, b}});
}

BOOST_AUTO_TEST_CASE(a_second_loss_at_every_step_of_the_restarted_recovery) {
  // The first disturbance restarts the recovery; the second comes at each
  // step of the new one (and of the run after it).
  auto all = every_disturbance();
  auto some = losses();
  for (const auto& first : first_losses) {
    auto n = answers_of_a_recovery(first) + 1;
    for (int at = 0; at <= n; ++at)
      for (const auto& a : some)
        for (int later = 0; later <= n + 2; ++later)
          for (const auto& b : all)
            recover(first, {{at, a}, {later, b}});
  }
}

BOOST_AUTO_TEST_CASE(three_losses_at_every_step_of_a_recovery) {
  auto some = losses();
  for (const auto& first : first_losses)
    for (int at = 0; at <= answers_of_a_recovery(first) + 1; ++at)
      for (const auto& a : some)
        for (const auto& b : some)
          for (const auto& c : some) {
            recover(first, {{at, a}, {0, b}, {0, c}});
            recover(first, {{at, a}, {1, b}, {1, c}});
          }
}

BOOST_AUTO_TEST_SUITE_END()
