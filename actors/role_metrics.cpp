#include "actors/role_metrics.hpp"

#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"
#include "messages/atoms.hpp"
#include "messages/kfac_messages.hpp"
#include "messages/sync_messages.hpp"

namespace syncfac {

namespace {

using observe::metric_family;
using observe::metric_type;
using label_list = std::vector<std::pair<std::string, std::string>>;

/// Families by name, so that roles of one kind share one family.
class family_set {
public:
  explicit family_set(label_list labels) : labels_(std::move(labels)) {
  }

  void add(const std::string& name, const std::string& help,
           metric_type type, const std::string& role, double value) {
    auto i = index_.find(name);
    if (i == index_.end()) {
      i = index_.emplace(name, out_.size()).first;
      out_.push_back({name, help, type, {}});
    }
    auto l = labels_;
    l.emplace_back("role", role);
    out_[i->second].samples.push_back({std::move(l), value});
  }

  void counter(const std::string& name, const std::string& help,
               const std::string& role, double value) {
    add(name, help, metric_type::counter, role, value);
  }

  void gauge(const std::string& name, const std::string& help,
             const std::string& role, double value) {
    add(name, help, metric_type::gauge, role, value);
  }

  std::vector<metric_family> take() {
    return std::move(out_);
  }

private:
  label_list labels_;
  std::map<std::string, size_t> index_;
  std::vector<metric_family> out_;
};

double d(int64_t x) {
  return static_cast<double>(x);
}

/// What a role sent: the figures of docs/benchmarks.md, "Transfers per
/// step".
void add_sent(family_set& f, const std::string& role,
              const transfer_counts& sent) {
  f.counter("syncfac_messages_sent_total",
            "Messages a role sent on the step path (requests and answers).",
            role, d(sent.messages));
  f.counter("syncfac_payload_bytes_sent_total",
            "Payload bytes (tensor values, sparse indices and rows) among "
            "the messages a role sent.",
            role, d(sent.bytes));
}

void add_shard(family_set& f, const std::string& role, const shard_status& s) {
  f.gauge("syncfac_shard_global_step", "The global step a PS shard is at.",
          role, d(s.global_step));
  f.counter("syncfac_pushes_accepted_total",
            "Gradient pushes a PS shard accepted.", role, d(s.accepted_pushes));
  f.counter("syncfac_pushes_stale_total",
            "Gradient pushes a PS shard dropped as stale.", role,
            d(s.stale_pushes));
  f.counter("syncfac_pushes_refused_total",
            "Gradient pushes a PS shard refused as malformed.", role,
            d(s.refused_pushes));
  add_sent(f, role, s.sent);
  f.counter("syncfac_pulls_waited_total",
            "Pulls a PS shard held until it reached the step they asked for.",
            role, d(s.pulls_waited));
  f.counter("syncfac_pulls_without_values_total",
            "Waiting pulls a PS shard answered without values (their wait "
            "ran out, or the worker cancelled).",
            role, d(s.pulls_without_values));
  if (s.kfac_layers > 0) {
    f.counter("syncfac_inverse_sets_total",
              "K-FAC inverse sets a PS shard installed.", role,
              d(s.inverse_sets));
    f.counter("syncfac_preconditioned_applies_total",
              "K-FAC: applies that preconditioned at least one layer.", role,
              d(s.preconditioned_applies));
  }
}

void add_worker(family_set& f, const std::string& role,
                const worker_status& w) {
  f.counter("syncfac_worker_steps_total", "Steps a worker computed.", role,
            d(w.steps));
  f.counter("syncfac_worker_stale_pushes_total",
            "A worker's pushes dropped as stale.", role, d(w.stale_pushes));
  f.counter("syncfac_worker_step_seconds_total",
            "Seconds a worker spent in steps.", role, w.step_s);
  f.counter("syncfac_token_wait_seconds_total",
            "Seconds of a worker's steps spent waiting for a token.", role,
            w.token_wait_s);
  f.gauge("syncfac_token_wait_share",
          "The share of a worker's step time spent waiting for a token.",
          role, w.step_s > 0 ? w.token_wait_s / w.step_s : 0.0);
  f.counter("syncfac_peers_lost_total",
            "Times a worker lost its chief or a shard.", role,
            d(w.peers_lost));
  f.counter("syncfac_worker_rebinds_total",
            "Times a worker was rebound after losing a peer.", role,
            d(w.rebinds));
  f.counter("syncfac_bytes_out_total",
            "Payload bytes of the gradient pushes a worker sent.", role,
            d(w.bytes_pushed));
  f.counter("syncfac_bytes_in_total",
            "Payload bytes of the variables a worker pulled and used.", role,
            d(w.bytes_pulled));
  f.counter("syncfac_bytes_in_unused_total",
            "Payload bytes of pull answers a worker received and could not "
            "use (older than its token).",
            role, d(w.bytes_pulled_unused));
  add_sent(f, role, w.sent);
}

void add_chief(family_set& f, const std::string& role, const chief_status& c) {
  f.gauge("syncfac_chief_global_step", "The chief's global step.", role,
          d(c.global_step));
  f.gauge("syncfac_tokens_queued", "Tokens in the chief's queue.", role,
          d(c.tokens_queued));
  f.gauge("syncfac_token_requests_waiting",
          "Workers waiting for a token.", role, d(c.token_requests_waiting));
  f.counter("syncfac_tokens_granted_total", "Tokens the chief granted.",
            role, d(c.tokens_granted));
  add_sent(f, role, c.sent);
  f.counter("syncfac_refused_reports_total",
            "Worker reports the chief refused as malformed.", role,
            d(c.refused_reports));
  f.gauge("syncfac_run_paused",
          "1 while the steps pause for a lost task to come back.", role,
          c.lost_task.empty() ? 0.0 : 1.0);
}

void add_covariance(family_set& f, const std::string& role,
                    const covariance_status& c) {
  f.counter("syncfac_cov_updates_total",
            "K-FAC factor moving-average updates.", role, d(c.cov_updates));
  f.counter("syncfac_stats_stale_total",
            "K-FAC statistics dropped as stale.", role, d(c.stale));
}

void add_inverse(family_set& f, const std::string& role,
                 const inverse_status& s) {
  f.counter("syncfac_inversions_total", "K-FAC factor sets inverted.", role,
            d(s.inversions));
  f.counter("syncfac_damping_raised_total",
            "K-FAC layer inversions that needed more damping.", role,
            d(s.damping_raised));
  f.counter("syncfac_invert_seconds_total",
            "Seconds K-FAC inversions took.", role, s.invert_s);
}

/// Asks `role` (a Handle) for its Status and adds it; false when it does
/// not answer within `timeout`.
template <class Handle, class Status>
bool ask(caf::scoped_actor& self, const caf::actor& role,
         std::chrono::milliseconds timeout, family_set& f,
         const std::string& name,
         void (*add)(family_set&, const std::string&, const Status&)) {
  bool answered = false;
  self->request(caf::actor_cast<Handle>(role), timeout, status_atom::value)
    .receive(
      [&](Status& st) {
        add(f, name, st);
        answered = true;
      },
      [&](caf::error&) {});
  return answered;
}

} // namespace

observe::metric_collector
role_metrics(caf::actor_system& sys, std::shared_ptr<role_directory> roles,
             std::chrono::milliseconds timeout) {
  auto* sysp = &sys;
  return [sysp, roles, timeout](const label_list& labels) {
    family_set f{labels};
    int64_t silent = 0;
    caf::scoped_actor self{*sysp};
    for (const auto& kvp : roles->snapshot()) {
      const auto& name = kvp.first;
      auto kind = name.substr(0, name.find(':'));
      if (kind != "ps" && kind != "worker" && kind != "chief"
          && kind != "covariance" && kind != "inverse")
        continue;
      bool answered = false;
      if (kind == "ps")
        answered = ask<ps_actor, shard_status>(self, kvp.second, timeout, f,
                                               name, add_shard);
      else if (kind == "worker")
        answered = ask<worker_actor, worker_status>(self, kvp.second, timeout,
                                                    f, name, add_worker);
      else if (kind == "chief")
        answered = ask<chief_actor, chief_status>(self, kvp.second, timeout,
                                                  f, name, add_chief);
      else if (kind == "covariance")
        answered = ask<covariance_actor, covariance_status>(
          self, kvp.second, timeout, f, name, add_covariance);
      else
        answered = ask<inverse_actor, inverse_status>(
          self, kvp.second, timeout, f, name, add_inverse);
      if (!answered)
        ++silent;
    }
    auto out = f.take();
    out.push_back({"syncfac_role_status_timeouts",
                   "Hosted roles that did not answer this scrape in time.",
                   metric_type::gauge,
                   {{labels, static_cast<double>(silent)}}});
    return out;
  };
}

} // namespace syncfac
