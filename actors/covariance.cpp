#include "actors/covariance.hpp"

#include <cmath>
#include <utility>

#include "actors/fatal_exception.hpp"
#include "actors/kfac_role_checks.hpp"
#include "actors/role_snapshots.hpp"
#include "actors/spawn_validated.hpp"
#include "kernels/cpu/kfac_factors.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

using self_ptr = covariance_actor::stateful_pointer<covariance_state>;

std::string actor_name(int32_t index) {
  return "covariance actor " + std::to_string(index);
}

// -- configuration -----------------------------------------------------------

void init_state(covariance_state& st, covariance_config cfg) {
  st.status.index = cfg.index;
  for (const auto& l : cfg.layers) {
    covariance_layer layer;
    layer.info = l;
    st.layers.push_back(std::move(layer));
  }
  for (const auto& handle : cfg.inverses)
    st.peers.push_back(inverse_peer{handle, {}, false, false});
  for (size_t i = 0; i < cfg.layers.size(); ++i)
    st.peers[static_cast<size_t>(cfg.inverse_of[i])].layers.push_back(i);
  st.cfg = std::move(cfg);
}

// -- stats updates -----------------------------------------------------------

size_t find_layer(const covariance_state& st, const std::string& name) {
  return syncfac::find_layer(
    st.layers, name,
    [](const covariance_layer& l) -> const std::string& {
      return l.info.name;
    });
}

/// What is wrong with one factor of an update (empty: nothing): it comes
/// as the matrix [dim, dim] or as rows [m >= 1, dim] with a positive
/// scale, never both.
std::string factor_problem(const std::string& name, const tensor& matrix,
                           const gram_rows& rows, int64_t dim) {
  if (rows.x.empty())
    return square_problem(name, matrix, dim);
  if (!matrix.empty())
    return name + " comes both as a matrix and as rows";
  if (rows.x.rank() != 2 || rows.x.dim(1) != dim)
    return name + " rows must be [m, " + std::to_string(dim) + "], got "
           + rows.x.shape_string();
  if (!(std::isfinite(rows.scale) && rows.scale > 0.0))
    return name + " rows' scale must be positive and finite, got "
           + std::to_string(rows.scale);
  return {};
}

/// Checks a whole update before anything changes: one bad layer refuses
/// it all, so the factors never mix a half-applied update in.
caf::error check_update(const covariance_state& st, const stats_update& u) {
  auto bad = [&](ec code, const std::string& what) {
    return make_error(code, actor_name(st.cfg.index)
                              + ": stats update from worker "
                              + std::to_string(u.worker) + " (step "
                              + std::to_string(u.step) + "): " + what);
  };
  if (u.step < 0)
    return bad(ec::bad_message, "step must be >= 0");
  if (u.examples < 1)
    return bad(ec::bad_message, "examples must be >= 1, got "
                                  + std::to_string(u.examples));
  std::vector<bool> seen(st.layers.size(), false);
  for (const auto& ls : u.layers) {
    auto i = find_layer(st, ls.layer);
    if (i == no_layer)
      return bad(ec::bad_message, "unknown layer " + in_quotes(ls.layer)
                                    + " (not kept by this actor)");
    if (seen[i])
      return bad(ec::bad_message, "layer " + in_quotes(ls.layer)
                                    + " appears twice");
    seen[i] = true;
    const auto& info = st.layers[i].info;
    for (const auto& problem :
         {factor_problem("A", ls.a, ls.a_rows, info.a_dim),
          factor_problem("G", ls.g, ls.g_rows, info.g_dim)})
      if (!problem.empty())
        return bad(ec::bad_message, "layer " + in_quotes(ls.layer) + ": "
                                      + problem);
    if (!ls.a.all_finite() || !ls.g.all_finite() || !ls.a_rows.x.all_finite()
        || !ls.g_rows.x.all_finite())
      return bad(ec::non_finite, "layer " + in_quotes(ls.layer)
                                   + ": A or G holds NaN or Inf");
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i])
      return bad(ec::bad_message, "layer " + in_quotes(st.layers[i].info.name)
                                    + " is missing");
  return caf::none;
}

/// Stale: its step was folded already, or a newer step is pending (which
/// folds this one's step away without it).
bool is_stale(const covariance_state& st, int64_t step) {
  return step <= st.last_folded || (st.pending && step < st.pending->step);
}

/// mean += (x - mean) · w: the running example-weighted mean, which stays
/// in range where a sum of examples · x could overflow.
void blend(tensor& mean, const tensor& x, float w) {
  for (int64_t k = 0; k < mean.size(); ++k)
    mean[k] += (x[k] - mean[k]) * w;
}

/// Adds one factor of a checked contribution of `examples` examples.
void add_factor(pending_factor& p, const tensor& matrix,
                const gram_rows& rows, int64_t examples) {
  if (!rows.x.empty()) {
    p.rows.push_back(rows);
    p.row_examples.push_back(examples);
    return;
  }
  p.mean_examples += examples;
  if (p.mean.empty())
    p.mean = matrix;
  else
    blend(p.mean, matrix,
          static_cast<float>(static_cast<double>(examples)
                             / static_cast<double>(p.mean_examples)));
}

/// Adds a checked update of the pending step.
void add_contribution(covariance_state& st, const stats_update& u) {
  auto& p = *st.pending;
  p.examples += u.examples;
  ++p.contributions;
  for (const auto& ls : u.layers) {
    auto i = find_layer(st, ls.layer);
    add_factor(p.a[i], ls.a, ls.a_rows, u.examples);
    add_factor(p.g[i], ls.g, ls.g_rows, u.examples);
  }
}

void start_pending(covariance_state& st, int64_t step) {
  st.pending = pending_step{step, 0, 0, {}, {}};
  st.pending->a.resize(st.layers.size());
  st.pending->g.resize(st.layers.size());
}

// -- folding -----------------------------------------------------------------

/// Folds a factor's waiting rows into its matrix.
caf::error fold_now(tensor& raw, deferred_rows& d) {
  if (d.rows.empty() && d.raw_scale == 1.0)
    return caf::none;
  if (auto err = cpu::fold_rows(raw, d.raw_scale, d.rows, d.weights))
    return err;
  d = deferred_rows{};
  return caf::none;
}

/// One EMA update of a factor with the step's contributions (`examples`
/// in all): raw ← decay · raw + (1 - decay) · mean, as cpu::ema_update,
/// for those that came as matrices; those that came as rows wait (see
/// deferred_rows) until they hold `dim` rows.
caf::error fold_factor(tensor& raw, deferred_rows& d, pending_factor& p,
                       int64_t examples, float decay, int64_t dim) {
  const float rest = 1.0f - decay;
  for (auto& w : d.weights)
    w *= decay;
  d.raw_scale *= decay;
  if (!p.mean.empty()) {
    auto beta = static_cast<float>(d.raw_scale);
    auto share = p.mean_examples == examples
                   ? rest
                   : static_cast<float>(
                       double{rest} * static_cast<double>(p.mean_examples)
                       / static_cast<double>(examples));
    if (raw.empty())
      raw = tensor(p.mean.shape()); // the zero start
    for (int64_t k = 0; k < raw.size(); ++k)
      raw[k] = beta * raw[k] + share * p.mean[k];
    d.raw_scale = 1.0;
  }
  for (size_t j = 0; j < p.rows.size(); ++j) {
    d.weights.push_back(double{rest}
                        * static_cast<double>(p.row_examples[j])
                        / static_cast<double>(examples));
    d.count += p.rows[j].x.dim(0);
    d.rows.push_back(std::move(p.rows[j]));
  }
  // More rows than columns would outgrow the matrix.
  return d.count >= dim ? fold_now(raw, d) : caf::none;
}

/// One EMA update of every layer with the step's contributions; a mean
/// that is not finite drops the step before anything changes (later
/// errors mean a bug: shapes are checked when updates arrive).
caf::error fold(covariance_state& st, pending_step& p) {
  for (size_t i = 0; i < st.layers.size(); ++i)
    if (!p.a[i].mean.all_finite() || !p.g[i].mean.all_finite())
      return make_error(ec::non_finite,
                        actor_name(st.cfg.index) + ": the mean statistics of "
                          + "step " + std::to_string(p.step) + " for layer "
                          + in_quotes(st.layers[i].info.name)
                          + " are not finite; the step is dropped");
  const float decay = st.cfg.kfac.cov_ema_decay;
  for (size_t i = 0; i < st.layers.size(); ++i) {
    auto& l = st.layers[i];
    if (auto err = fold_factor(l.a_raw, l.a_deferred, p.a[i], p.examples,
                               decay, l.info.a_dim))
      return with_context(err, actor_name(st.cfg.index) + ", layer "
                                 + in_quotes(l.info.name));
    if (auto err = fold_factor(l.g_raw, l.g_deferred, p.g[i], p.examples,
                               decay, l.info.g_dim))
      return with_context(err, actor_name(st.cfg.index) + ", layer "
                                 + in_quotes(l.info.name));
    // A and G share one weight (as cpu::ema_update advances it).
    l.weight = decay * l.weight + (1.0f - decay);
  }
  return caf::none;
}

// -- hand-offs ---------------------------------------------------------------

/// The current factors of the peer's layers.
caf::expected<factor_set> make_factor_set(const covariance_state& st,
                                          const inverse_peer& peer) {
  factor_set set;
  set.step = st.last_folded;
  for (auto i : peer.layers) {
    const auto& l = st.layers[i];
    layer_factors f;
    f.layer = l.info.name;
    f.locations = l.info.locations;
    f.cov_updates = st.status.cov_updates;
    if (auto err = cpu::ema_value(l.a_raw, l.weight, f.a))
      return with_context(err, "layer " + in_quotes(l.info.name));
    if (auto err = cpu::ema_value(l.g_raw, l.weight, f.g))
      return with_context(err, "layer " + in_quotes(l.info.name));
    set.layers.push_back(std::move(f));
  }
  return set;
}

void note_send_failure(covariance_state& st, size_t k,
                       const caf::error& err) {
  ++st.status.send_failures;
  st.status.last_error = actor_name(st.cfg.index)
                         + ": factor set for inverse actor #"
                         + std::to_string(k) + ": " + render(err);
}

void hand_off(self_ptr self, size_t k);

/// The peer answered (or the request failed): send what became due.
void hand_off_done(self_ptr self, size_t k) {
  auto& peer = self->state.peers[k];
  peer.in_flight = false;
  if (peer.due)
    hand_off(self, k);
}

void hand_off(self_ptr self, size_t k) {
  auto& st = self->state;
  auto& peer = st.peers[k];
  if (peer.in_flight) {
    peer.due = true;
    return;
  }
  peer.due = false;
  if (auto err = fold_deferred(st)) {
    note_send_failure(st, k, err);
    return;
  }
  auto set = make_factor_set(st, peer);
  if (!set) {
    note_send_failure(st, k, set.error());
    return;
  }
  peer.in_flight = true;
  ++st.status.factor_sets_sent;
  self->request(peer.handle, st.cfg.request_timeout, factors_atom::value,
                std::move(*set))
    .then([self, k](caf::ok_atom) { hand_off_done(self, k); },
          [self, k](caf::error& err) {
            note_send_failure(self->state, k, err);
            hand_off_done(self, k);
          });
}

/// Whether the factors go to the inverse actors after folding `step`: at
/// every invert_every-th fold, or under the exact cadence after the step s
/// with (s + 1) % invert_every == 0 (the seeds' tf.mod(global_step + 1,
/// invert_every) == 0).
bool inversion_due(const covariance_state& st, int64_t step) {
  auto every = st.cfg.kfac.invert_every;
  if (st.cfg.kfac.cadence == kfac_cadence::exact)
    return (step + 1) % every == 0;
  return st.status.cov_updates % every == 0;
}

/// Folds the pending step and hands the factors on when an inversion is
/// due.
void fold_pending(self_ptr self) {
  auto& st = self->state;
  auto p = std::move(*st.pending);
  st.pending.reset();
  if (auto err = fold(st, p)) {
    st.status.last_error = render(err);
    return;
  }
  st.last_folded = p.step;
  ++st.status.cov_updates;
  if (!inversion_due(st, p.step))
    return;
  for (size_t k = 0; k < st.peers.size(); ++k)
    if (!st.peers[k].layers.empty()) {
      ++st.status.factor_sets_due;
      hand_off(self, k);
    }
}

caf::result<stats_ack> on_stats(self_ptr self, const stats_update& u) {
  auto& st = self->state;
  ++st.status.received;
  if (auto err = check_update(st, u)) {
    ++st.status.refused;
    st.status.last_error = render(err);
    return err;
  }
  if (is_stale(st, u.step)) {
    ++st.status.stale;
    return stats_ack{false, st.status.cov_updates};
  }
  // A newer step: the pending one will not get more contributions worth
  // waiting for.
  if (st.pending && u.step > st.pending->step)
    fold_pending(self);
  if (!st.pending)
    start_pending(st, u.step);
  add_contribution(st, u);
  if (st.pending->contributions >= st.cfg.contributions_per_step)
    fold_pending(self);
  return stats_ack{true, st.status.cov_updates};
}

} // namespace

// -- config and behaviour ----------------------------------------------------

caf::error fold_deferred(covariance_state& st) {
  for (auto& l : st.layers) {
    auto err = fold_now(l.a_raw, l.a_deferred);
    if (!err)
      err = fold_now(l.g_raw, l.g_deferred);
    if (err)
      return with_context(err, actor_name(st.cfg.index) + ", layer "
                                 + in_quotes(l.info.name));
  }
  return caf::none;
}

caf::error covariance_config::validate() const {
  const auto who = actor_name(index);
  if (index < 0)
    return bad_config(who, "index must be >= 0");
  if (auto err = check_role_layers(who, layers, "keep factors of"))
    return err;
  if (auto err = kfac.validate())
    return with_context(err, who);
  if (contributions_per_step < 1)
    return bad_config(who, "contributions_per_step must be >= 1, got "
                             + std::to_string(contributions_per_step));
  if (auto err = check_layer_peers(who, "inverse actor", inverses,
                                   "inverse_of", inverse_of, layers))
    return err;
  if (request_timeout.count() <= 0)
    return bad_config(who, "request_timeout must be positive");
  return caf::none;
}

namespace {

covariance_actor::behavior_type covariance_role(self_ptr self,
                                                covariance_config cfg) {
  end_program_on_exception(self, "covariance");
  if (auto err = cfg.validate()) {
    // Only reachable when spawned around spawn_covariance, which validates.
    self->quit(std::move(err));
    return covariance_actor::behavior_type::make_empty_behavior();
  }
  init_state(self->state, std::move(cfg));
  return {
    [=](stats_atom, const stats_update& u) -> caf::result<stats_ack> {
      return on_stats(self, u);
    },
    [=](rewire_atom, std::vector<inverse_actor>& inverses) {
      auto& peers = self->state.peers;
      if (inverses.size() != peers.size())
        return;
      // A hand-off to the old actor is abandoned: the next one goes out.
      for (size_t k = 0; k < peers.size(); ++k)
        peers[k] = inverse_peer{std::move(inverses[k]),
                                std::move(peers[k].layers), false, false};
    },
    [=](checkpoint_atom) -> caf::result<covariance_snapshot> {
      // A snapshot saves the matrices: the rows waiting go in first.
      if (auto err = fold_deferred(self->state))
        return err;
      return take_snapshot(self->state);
    },
    [=](restore_atom, covariance_snapshot& snap) -> caf::result<caf::ok_atom> {
      if (auto err = restore_snapshot(self->state, std::move(snap)))
        return err;
      // The restored matrices are the whole average: no rows wait.
      for (auto& l : self->state.layers) {
        l.a_deferred = deferred_rows{};
        l.g_deferred = deferred_rows{};
      }
      return caf::ok_atom::value;
    },
    [=](status_atom) -> covariance_status {
      return self->state.status;
    },
  };
}

} // namespace

caf::expected<covariance_actor> spawn_covariance(caf::actor_system& sys,
                                                 covariance_config cfg) {
  return spawn_validated(sys, covariance_role, std::move(cfg));
}

} // namespace syncfac
