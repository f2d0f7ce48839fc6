#include "actors/inverse.hpp"

#include <memory>
#include <utility>

#include <caf/typed_response_promise.hpp>

#include "actors/fatal_exception.hpp"
#include "actors/kfac_role_checks.hpp"
#include "actors/spawn_validated.hpp"
#include "runtime/elapsed.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

using self_ptr = inverse_actor::stateful_pointer<inverse_state>;
using ok_promise = caf::typed_response_promise<caf::ok_atom>;

std::string actor_name(int32_t index) {
  return "inverse actor " + std::to_string(index);
}

// -- factor sets -------------------------------------------------------------

size_t find_layer(const inverse_config& cfg, const std::string& name) {
  return syncfac::find_layer(
    cfg.layers, name,
    [](const kfac_layer& l) -> const std::string& { return l.name; });
}

/// Checks a whole set before the device sees it: a peer that sends
/// factors of the wrong shape has a different layer collection.
caf::error check_set(const inverse_state& st, const factor_set& set) {
  auto bad = [&](const std::string& what) {
    return make_error(ec::bad_message, actor_name(st.cfg.index)
                                         + ": factor set of step "
                                         + std::to_string(set.step) + ": "
                                         + what);
  };
  std::vector<bool> seen(st.cfg.layers.size(), false);
  for (const auto& f : set.layers) {
    auto i = find_layer(st.cfg, f.layer);
    if (i == no_layer)
      return bad("unknown layer " + in_quotes(f.layer)
                 + " (not inverted by this actor)");
    if (seen[i])
      return bad("layer " + in_quotes(f.layer) + " appears twice");
    seen[i] = true;
    const auto& info = st.cfg.layers[i];
    for (const auto& problem : {square_problem("A", f.a, info.a_dim),
                                square_problem("G", f.g, info.g_dim)})
      if (!problem.empty())
        return bad("layer " + in_quotes(f.layer) + ": " + problem);
    if (f.locations != info.locations)
      return bad("layer " + in_quotes(f.layer) + ": "
                 + std::to_string(f.locations) + " locations, expected "
                 + std::to_string(info.locations));
  }
  return caf::none;
}

/// The set without the layers that are too early to invert; counts them.
factor_set drop_too_early(inverse_state& st, factor_set set) {
  factor_set ready;
  ready.step = set.step;
  for (auto& f : set.layers) {
    if (f.cov_updates < st.cfg.kfac.min_cov_updates)
      ++st.status.too_early;
    else
      ready.layers.push_back(std::move(f));
  }
  return ready;
}

void note_inversion(inverse_state& st, const inverse_set& inv,
                    double seconds) {
  st.status.inversions += static_cast<int64_t>(inv.layers.size());
  st.status.failed += static_cast<int64_t>(inv.problems.size());
  st.status.damping_raised += inv.damping_raised;
  st.status.invert_s += seconds;
  if (!inv.problems.empty())
    st.status.last_error = actor_name(st.cfg.index) + ": "
                           + inv.problems.back();
}

/// The inverses split by the shard owning their layers.
std::vector<inverse_set> split_by_shard(inverse_state& st,
                                        inverse_set inv) {
  std::vector<inverse_set> parts(st.cfg.shards.size());
  for (auto& part : parts)
    part.step = inv.step;
  for (auto& l : inv.layers) {
    auto i = find_layer(st.cfg, l.layer);
    if (i == no_layer) {
      // The device answered for a layer it was not asked about.
      ++st.status.failed;
      st.status.last_error = actor_name(st.cfg.index)
                             + ": the device returned an inverse for "
                               "unknown layer "
                             + in_quotes(l.layer);
      continue;
    }
    auto k = static_cast<size_t>(st.cfg.shard_of[i]);
    parts[k].layers.push_back(std::move(l));
  }
  return parts;
}

/// Sends each shard its part; answers `promise` once all have answered,
/// with the first failure if any.
void ship(self_ptr self, inverse_set inv, ok_promise promise) {
  auto& st = self->state;
  auto parts = split_by_shard(st, std::move(inv));
  struct progress {
    ok_promise promise;
    size_t pending = 0;
    caf::error first_error;
  };
  auto prog = std::make_shared<progress>();
  prog->promise = std::move(promise);
  for (const auto& part : parts)
    prog->pending += part.layers.empty() ? 0 : 1;
  if (prog->pending == 0) {
    prog->promise.deliver(caf::ok_atom::value);
    return;
  }
  auto finish = [prog] {
    if (--prog->pending > 0)
      return;
    if (prog->first_error)
      prog->promise.deliver(prog->first_error);
    else
      prog->promise.deliver(caf::ok_atom::value);
  };
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].layers.empty())
      continue;
    self->request(st.cfg.shards[k], st.cfg.request_timeout,
                  inverse_atom::value, std::move(parts[k]))
      .then(
        [self, finish](caf::ok_atom) {
          ++self->state.status.shipped;
          finish();
        },
        [self, prog, finish, k](caf::error& err) {
          auto& st = self->state;
          ++st.status.ship_failures;
          auto failure = with_context(err, actor_name(st.cfg.index)
                                             + ": inverses for PS shard #"
                                             + std::to_string(k));
          st.status.last_error = render(failure);
          if (!prog->first_error)
            prog->first_error = std::move(failure);
          finish();
        });
  }
}

caf::result<caf::ok_atom> on_factors(self_ptr self, factor_set set) {
  auto& st = self->state;
  ++st.status.received;
  if (auto err = check_set(st, set)) {
    ++st.status.refused;
    st.status.last_error = render(err);
    return err;
  }
  auto ready = drop_too_early(st, std::move(set));
  if (ready.layers.empty())
    return caf::ok_atom::value;
  auto promise = self->make_response_promise<caf::ok_atom>();
  auto layers = static_cast<int64_t>(ready.layers.size());
  auto t0 = std::chrono::steady_clock::now();
  self->request(st.cfg.device, st.cfg.request_timeout, invert_atom::value,
                std::move(ready), st.cfg.kfac)
    .then(
      [self, promise, t0](inverse_set& inv) {
        note_inversion(self->state, inv, seconds_since(t0));
        ship(self, std::move(inv), promise);
      },
      [self, promise, layers](caf::error& err) mutable {
        auto& st = self->state;
        // Every layer of the set keeps its previous inverse.
        st.status.failed += layers;
        auto failure = with_context(err, actor_name(st.cfg.index)
                                           + ": inverting on the device");
        st.status.last_error = render(failure);
        promise.deliver(std::move(failure));
      });
  return promise;
}

} // namespace

// -- config and behaviour ----------------------------------------------------

caf::error inverse_config::validate() const {
  const auto who = actor_name(index);
  if (index < 0)
    return bad_config(who, "index must be >= 0");
  if (auto err = check_role_layers(who, layers, "invert"))
    return err;
  if (auto err = kfac.validate())
    return with_context(err, who);
  if (!device)
    return bad_config(who, "no device actor");
  if (auto err = check_layer_peers(who, "PS shard", shards,
                                   "shard_of", shard_of, layers))
    return err;
  if (request_timeout.count() <= 0)
    return bad_config(who, "request_timeout must be positive");
  return caf::none;
}

namespace {

inverse_actor::behavior_type inverse_role(self_ptr self, inverse_config cfg) {
  end_program_on_exception(self, "inverse");
  if (auto err = cfg.validate()) {
    // Only reachable when spawned around spawn_inverse, which validates.
    self->quit(std::move(err));
    return inverse_actor::behavior_type::make_empty_behavior();
  }
  self->state.status.index = cfg.index;
  self->state.cfg = std::move(cfg);
  return {
    [=](factors_atom, factor_set& set) -> caf::result<caf::ok_atom> {
      return on_factors(self, std::move(set));
    },
    [=](rewire_atom, std::vector<ps_actor>& shards) {
      if (shards.size() == self->state.cfg.shards.size())
        self->state.cfg.shards = std::move(shards);
    },
    [=](status_atom) -> inverse_status {
      return self->state.status;
    },
  };
}

} // namespace

caf::expected<inverse_actor> spawn_inverse(caf::actor_system& sys,
                                           inverse_config cfg) {
  return spawn_validated(sys, inverse_role, std::move(cfg));
}

} // namespace syncfac
