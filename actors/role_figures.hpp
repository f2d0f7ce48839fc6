#pragma once

// The roles' status tables: every number of a role's status
// (messages/sync_messages.hpp, messages/kfac_messages.hpp) with its name,
// Prometheus family, unit and help, declared once. /metrics
// (actors/role_metrics.hpp) and the run's summary (actors/role_totals.hpp)
// are written from these and nothing else; a number of a status that is
// not here is in neither, which tests/actors/status_tables.cpp catches.
//
// figures(status, f) calls f(part, figure, value) once per figure, value
// an int64_t or a double. Left out: the index that names the role (its
// "role" label: "ps:1"), and the texts and lists (errors, the lost task,
// the shard's variables), which are not figures.

#include <cstdint>

#include "messages/kfac_messages.hpp"
#include "messages/sync_messages.hpp"
#include "runtime/observe/figure.hpp"

namespace syncfac {

/// Where the run's summary puts a role's figure: with its role
/// ("roles": {"ps": {...}}) or with K-FAC's other figures ("kfac").
enum class summary_part { role, kfac };

namespace role_figures_detail {

using observe::figure;
using observe::figure_fold;
constexpr auto counter = observe::metric_type::counter;
constexpr auto gauge = observe::metric_type::gauge;

/// What a role sent on the step path: the figures of docs/benchmarks-history.md,
/// "Transfers per step".
template <class F>
void sent_figures(const transfer_counts& sent, F&& f) {
  f(summary_part::role,
    {"messages_sent", "syncfac_messages_sent_total", counter, "",
     "Messages a role sent on the step path (requests and answers)."},
    sent.messages);
  f(summary_part::role,
    {"payload_bytes_sent", "syncfac_payload_bytes_sent_total", counter,
     "bytes",
     "Payload bytes (tensor values, sparse indices and rows) among the "
     "messages a role sent."},
    sent.bytes);
}

} // namespace role_figures_detail

inline const char* role_kind(const shard_status&) {
  return "ps";
}

template <class F>
void figures(const shard_status& s, F&& f) {
  using namespace role_figures_detail;
  constexpr auto role = summary_part::role;
  constexpr auto kfac = summary_part::kfac;
  f(role,
    {"global_step", "syncfac_shard_global_step", gauge, "steps",
     "The global step a PS shard is at.", figure_fold::max},
    s.global_step);
  f(role,
    {"accepted_pushes", "syncfac_pushes_accepted_total", counter, "",
     "Gradient pushes a PS shard accepted."},
    s.accepted_pushes);
  f(role,
    {"stale_pushes", "syncfac_pushes_stale_total", counter, "",
     "Gradient pushes a PS shard dropped as stale."},
    s.stale_pushes);
  f(role,
    {"refused_pushes", "syncfac_pushes_refused_total", counter, "",
     "Gradient pushes a PS shard refused as malformed."},
    s.refused_pushes);
  f(kfac,
    {"layers", "syncfac_kfac_layers", gauge, "",
     "K-FAC layers a PS shard holds."},
    s.kfac_layers);
  f(kfac,
    {"layers_ready", "syncfac_kfac_layers_ready", gauge, "",
     "K-FAC layers of a PS shard that have an inverse."},
    s.kfac_ready);
  f(kfac,
    {"inverse_sets", "syncfac_inverse_sets_total", counter, "",
     "K-FAC inverse sets a PS shard installed."},
    s.inverse_sets);
  f(kfac,
    {"inverse_sets_refused", "syncfac_inverse_sets_refused_total", counter,
     "", "K-FAC inverse sets a PS shard refused as malformed."},
    s.refused_inverses);
  f(kfac,
    {"preconditioned_steps", "syncfac_preconditioned_applies_total",
     counter, "steps",
     "K-FAC: applies that preconditioned at least one layer.",
     figure_fold::max},
    s.preconditioned_applies);
  f(kfac,
    {"kl_clip", "syncfac_kl_clip", gauge, "share",
     "K-FAC: the factor the KL clip scaled a PS shard's last preconditioned "
     "update by (1: not clipped).",
     figure_fold::mean},
    s.last_clip);
  sent_figures(s.sent, f);
  f(role,
    {"pulls_waited", "syncfac_pulls_waited_total", counter, "",
     "Pulls a PS shard held until it reached the step they asked for."},
    s.pulls_waited);
  f(role,
    {"pulls_without_values", "syncfac_pulls_without_values_total", counter,
     "",
     "Waiting pulls a PS shard answered without values (their wait ran "
     "out, or the worker cancelled)."},
    s.pulls_without_values);
  f(role,
    {"last_applied_step", "syncfac_shard_last_applied_step", gauge, "steps",
     "The step a PS shard's last apply moved it to (0 after a restore).",
     figure_fold::max},
    s.last_applied_step);
  f(role,
    {"clip_factor", "syncfac_shard_clip_factor", gauge, "share",
     "The --clip_norm factor of a PS shard's last apply (1: not clipped).",
     figure_fold::mean},
    s.last_gradient_scale);
}

inline const char* role_kind(const worker_status&) {
  return "worker";
}

template <class F>
void figures(const worker_status& w, F&& f) {
  using namespace role_figures_detail;
  constexpr auto role = summary_part::role;
  constexpr auto kfac = summary_part::kfac;
  f(role,
    {"local_step", "syncfac_worker_local_step", gauge, "steps",
     "The global step a worker's last token carried.", figure_fold::max},
    w.local_step);
  f(role,
    {"steps", "syncfac_worker_steps_total", counter, "steps",
     "Steps a worker computed."},
    w.steps);
  f(role,
    {"stale_pushes", "syncfac_worker_stale_pushes_total", counter, "",
     "A worker's pushes dropped as stale."},
    w.stale_pushes);
  f(role,
    {"step_s", "syncfac_worker_step_seconds_total", counter, "seconds",
     "Seconds a worker spent in steps."},
    w.step_s);
  f(role,
    {"token_wait_s", "syncfac_token_wait_seconds_total", counter, "seconds",
     "Seconds of a worker's steps spent waiting for a token."},
    w.token_wait_s);
  f(role,
    {"token_wait_share", "syncfac_token_wait_share", gauge, "share",
     "The share of a worker's step time spent waiting for a token.",
     figure_fold::mean},
    w.step_s > 0 ? w.token_wait_s / w.step_s : 0.0);
  f(role,
    {"compute_s", "syncfac_worker_compute_seconds_total", counter, "seconds",
     "Seconds of a worker's steps its device spent computing."},
    w.compute_s);
  f(kfac,
    {"stats_sent", "syncfac_stats_sent_total", counter, "",
     "K-FAC statistics a worker sent to the covariance actors."},
    w.stats_sent);
  f(kfac,
    {"stats_answered_stale", "syncfac_stats_answered_stale_total", counter,
     "", "K-FAC statistics of a worker a covariance actor answered as stale."},
    w.stats_stale);
  f(kfac,
    {"stats_skipped", "syncfac_stats_skipped_total", counter, "",
     "K-FAC statistics a worker skipped under back-pressure."},
    w.stats_skipped);
  f(kfac,
    {"stats_send_failures", "syncfac_stats_send_failures_total", counter, "",
     "K-FAC statistics a worker failed to send."},
    w.stats_failed);
  f(role,
    {"peers_lost", "syncfac_peers_lost_total", counter, "",
     "Times a worker lost its chief or a shard."},
    w.peers_lost);
  f(role,
    {"rebinds", "syncfac_worker_rebinds_total", counter, "",
     "Times a worker was rebound after losing a peer."},
    w.rebinds);
  f(role,
    {"bytes_pushed", "syncfac_bytes_out_total", counter, "bytes",
     "Payload bytes of the gradient pushes a worker sent."},
    w.bytes_pushed);
  f(role,
    {"bytes_pulled", "syncfac_bytes_in_total", counter, "bytes",
     "Payload bytes of the variables a worker pulled and used."},
    w.bytes_pulled);
  sent_figures(w.sent, f);
  f(role,
    {"bytes_pulled_unused", "syncfac_bytes_in_unused_total", counter,
     "bytes",
     "Payload bytes of pull answers a worker received and could not use "
     "(older than its token)."},
    w.bytes_pulled_unused);
}

inline const char* role_kind(const chief_status&) {
  return "chief";
}

template <class F>
void figures(const chief_status& c, F&& f) {
  using namespace role_figures_detail;
  constexpr auto role = summary_part::role;
  f(role,
    {"global_step", "syncfac_chief_global_step", gauge, "steps",
     "The chief's global step.", figure_fold::max},
    c.global_step);
  f(role,
    {"tokens_queued", "syncfac_tokens_queued", gauge, "",
     "Tokens in the chief's queue."},
    c.tokens_queued);
  f(role,
    {"token_requests_waiting", "syncfac_token_requests_waiting", gauge, "",
     "Workers waiting for a token."},
    c.token_requests_waiting);
  f(role,
    {"tokens_granted", "syncfac_tokens_granted_total", counter, "",
     "Tokens the chief granted."},
    c.tokens_granted);
  f(role,
    {"finished", "syncfac_run_finished", gauge, "",
     "1 once the chief has run every step.", figure_fold::max},
    int64_t{c.finished ? 1 : 0});
  f(role,
    {"refused_reports", "syncfac_refused_reports_total", counter, "",
     "Worker reports the chief refused as malformed."},
    c.refused_reports);
  f(role,
    {"paused", "syncfac_run_paused", gauge, "",
     "1 while the steps pause for a lost task to come back.",
     figure_fold::max},
    int64_t{c.lost_task.empty() ? 0 : 1});
  f(role,
    {"lost_at", "syncfac_lost_at_step", gauge, "steps",
     "The step at which the task the steps pause for was lost (-1: none).",
     figure_fold::max},
    c.lost_at);
  sent_figures(c.sent, f);
}

inline const char* role_kind(const covariance_status&) {
  return "covariance";
}

template <class F>
void figures(const covariance_status& c, F&& f) {
  using namespace role_figures_detail;
  constexpr auto kfac = summary_part::kfac;
  f(kfac,
    {"stats_received", "syncfac_stats_received_total", counter, "",
     "K-FAC statistics updates a covariance actor received."},
    c.received);
  f(kfac,
    {"cov_updates", "syncfac_cov_updates_total", counter, "steps",
     "K-FAC factor moving-average updates.", figure_fold::max},
    c.cov_updates);
  f(kfac,
    {"stats_stale", "syncfac_stats_stale_total", counter, "",
     "K-FAC statistics dropped as stale."},
    c.stale);
  f(kfac,
    {"stats_refused", "syncfac_stats_refused_total", counter, "",
     "K-FAC statistics updates a covariance actor refused as malformed."},
    c.refused);
  f(kfac,
    {"factor_sets", "syncfac_factor_sets_sent_total", counter, "",
     "K-FAC factor sets a covariance actor handed to inverse actors."},
    c.factor_sets_sent);
  f(kfac,
    {"factor_set_send_failures", "syncfac_factor_set_send_failures_total",
     counter, "",
     "K-FAC factor sets a covariance actor failed to hand over."},
    c.send_failures);
  f(kfac,
    {"factor_sets_due", "syncfac_factor_sets_due_total", counter, "",
     "K-FAC factor set hand-offs the cadence called for (sent ones trail "
     "it by those waiting for a busy inverse actor)."},
    c.factor_sets_due);
}

inline const char* role_kind(const inverse_status&) {
  return "inverse";
}

template <class F>
void figures(const inverse_status& s, F&& f) {
  using namespace role_figures_detail;
  constexpr auto kfac = summary_part::kfac;
  f(kfac,
    {"factor_sets_received", "syncfac_factor_sets_received_total", counter,
     "", "K-FAC factor sets an inverse actor received."},
    s.received);
  f(kfac,
    {"factor_sets_refused", "syncfac_factor_sets_refused_total", counter, "",
     "K-FAC factor sets an inverse actor refused as malformed."},
    s.refused);
  f(kfac,
    {"layer_inversions", "syncfac_inversions_total", counter, "",
     "K-FAC factor sets inverted."},
    s.inversions);
  f(kfac,
    {"inversions_too_early", "syncfac_inversions_too_early_total", counter,
     "", "K-FAC layer inversions skipped as too early."},
    s.too_early);
  f(kfac,
    {"inversions_failed", "syncfac_inversions_failed_total", counter, "",
     "K-FAC layer inversions that failed."},
    s.failed);
  f(kfac,
    {"damping_raised", "syncfac_damping_raised_total", counter, "",
     "K-FAC layer inversions that needed more damping."},
    s.damping_raised);
  f(kfac,
    {"inverse_sets_shipped", "syncfac_inverse_sets_shipped_total", counter,
     "", "K-FAC inverse sets an inverse actor delivered to PS shards."},
    s.shipped);
  f(kfac,
    {"inverse_ship_failures", "syncfac_inverse_ship_failures_total", counter,
     "", "K-FAC inverse sets an inverse actor failed to deliver."},
    s.ship_failures);
  f(kfac,
    {"invert_s", "syncfac_invert_seconds_total", counter, "seconds",
     "Seconds K-FAC inversions took."},
    s.invert_s);
}

} // namespace syncfac
