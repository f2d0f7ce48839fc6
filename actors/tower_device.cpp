#include "actors/tower_device.hpp"

#include <memory>
#include <string>

#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/fatal_exception.hpp"
#include "actors/spawn_validated.hpp"
#include "actors/tower_combine.hpp"
#include "actors/tower_split.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

struct tower_state {
  static inline const char* name = "tower_device";

  std::vector<device_actor> towers;
  std::chrono::milliseconds timeout{0};
  /// The tower the next inversion goes to.
  size_t next_invert = 0;
};

using self_ptr = device_actor::stateful_pointer<tower_state>;

/// A tower's failure as the answer to the whole request: names the tower
/// and the request, keeps the tower's error code (a timeout or a tower
/// that is gone become ec::timeout and ec::peer_down).
caf::error tower_failed(self_ptr self, size_t k, const std::string& what,
                        const caf::error& err) {
  auto prefix = tower::who(k, self->state.towers.size()) + " (" + what + ")";
  if (err == caf::sec::request_timeout)
    return make_error(ec::timeout,
                      prefix + ": no answer within "
                        + std::to_string(self->state.timeout.count())
                        + " ms");
  if (err.category() != error_category)
    return make_error(ec::peer_down, prefix + ": " + render(err));
  return with_context(err, prefix);
}

/// Sends one request to each tower in `which` (make(k) sends it and
/// returns the response handle) and, once all have answered, answers `rp`
/// with combine(answers in the order of `which`). The first failure
/// answers `rp` instead; later answers are dropped.
template <class Result, class Out, class Make, class Combine>
void fan_out(self_ptr self, std::vector<size_t> which, std::string what,
             caf::typed_response_promise<Out> rp, Make make,
             Combine combine) {
  struct pending {
    caf::typed_response_promise<Out> rp;
    std::vector<Result> results;
    size_t left = 0;
    bool over = false;
  };
  auto p = std::make_shared<pending>();
  p->rp = std::move(rp);
  p->results.resize(which.size());
  p->left = which.size();
  for (size_t i = 0; i < which.size(); ++i) {
    auto k = which[i];
    make(k).then(
      [=](Result& x) {
        if (p->over)
          return;
        p->results[i] = std::move(x);
        if (--p->left > 0)
          return;
        p->over = true;
        caf::expected<Out> out = combine(p->results);
        if (out)
          p->rp.deliver(std::move(*out));
        else
          p->rp.deliver(out.error());
      },
      [=](caf::error& err) {
        if (p->over)
          return;
        p->over = true;
        p->rp.deliver(tower_failed(self, k, what, err));
      });
  }
}

std::vector<size_t> all_towers(self_ptr self) {
  std::vector<size_t> result(self->state.towers.size());
  for (size_t k = 0; k < result.size(); ++k)
    result[k] = k;
  return result;
}

/// Sends every tower the same request (`xs`, answered with ok) and
/// answers ok once all did: the replicas stay identical.
template <class... Ts>
caf::result<caf::ok_atom> to_every_tower(self_ptr self, std::string what,
                                         Ts... xs) {
  auto rp = self->make_response_promise<caf::ok_atom>();
  fan_out<caf::ok_atom>(
    self, all_towers(self), std::move(what), rp,
    [=](size_t k) {
      return self->request(self->state.towers[k], self->state.timeout, xs...);
    },
    [](std::vector<caf::ok_atom>&) -> caf::expected<caf::ok_atom> {
      return caf::ok_atom::value;
    });
  return rp;
}

/// The answer of tower k alone to the request make(k) sends: the replicas
/// are identical, or the work goes to one tower.
template <class Out, class Make>
caf::result<Out> from_tower(self_ptr self, size_t k, std::string what,
                            Make make) {
  auto rp = self->make_response_promise<Out>();
  fan_out<Out>(self, {k}, std::move(what), rp, std::move(make),
               [](std::vector<Out>& xs) -> caf::expected<Out> {
                 return std::move(xs[0]);
               });
  return rp;
}

/// Sends each tower of `plan` its part of `b` through make(k, i, part),
/// tower k being the plan's i-th, and answers `rp` with combine(answers in
/// the plan's order). make is called before this returns.
template <class Result, class Out, class Make, class Combine>
void fan_out_parts(self_ptr self,
                   std::shared_ptr<const tower::split_plan> plan,
                   const batch& b, const std::string& what,
                   caf::typed_response_promise<Out> rp, Make make,
                   Combine combine) {
  std::vector<size_t> index_of(self->state.towers.size());
  for (size_t i = 0; i < plan->towers.size(); ++i)
    index_of[plan->towers[i]] = i;
  fan_out<Result>(
    self, plan->towers, what, std::move(rp),
    [=, &b](size_t k) {
      auto i = index_of[k];
      return make(k, i, tower::batch_range(b, plan->begin[i], plan->end[i]));
    },
    std::move(combine));
}

/// Splits `b`, sends each tower its part through make(k, part) and
/// answers with the combined step_result.
template <class Make>
caf::result<step_result> split_steps(self_ptr self, const batch& b,
                                     const std::string& what, Make make) {
  auto plan = tower::plan_split(b, self->state.towers.size(), what);
  if (!plan)
    return plan.error();
  auto rp = self->make_response_promise<step_result>();
  auto shared_plan
    = std::make_shared<const tower::split_plan>(std::move(*plan));
  fan_out_parts<step_result>(
    self, shared_plan, b, what, rp,
    [&](size_t k, size_t, batch part) { return make(k, std::move(part)); },
    [=](std::vector<step_result>& rs) {
      return tower::combine_steps(self->state.towers.size(), what,
                                  *shared_plan, rs);
    });
  return rp;
}

device_actor::behavior_type tower_device(self_ptr self,
                                         tower_device_config cfg) {
  end_program_on_exception(self, "tower device");
  self->state.towers = std::move(cfg.towers);
  self->state.timeout = cfg.request_timeout;
  for (auto& t : self->state.towers)
    self->link_to(t);
  return {
    [=](load_model_atom, const model_spec& spec,
        uint64_t seed) -> caf::result<model_info> {
      auto rp = self->make_response_promise<model_info>();
      const std::string what = "load_model";
      fan_out<model_info>(
        self, all_towers(self), what, rp,
        [=](size_t k) {
          return self->request(self->state.towers[k], self->state.timeout,
                               load_model_atom::value, spec, seed);
        },
        [=](std::vector<model_info>& infos) -> caf::expected<model_info> {
          // Identical replicas are what makes the towers' gradients parts
          // of one batch's gradient; a backend that initialises differently
          // would break that silently.
          for (size_t k = 1; k < infos.size(); ++k) {
            const auto& x = infos[k].initial;
            const auto& y = infos[0].initial;
            if (x.size() != y.size())
              return tower::bad_answer(k, self->state.towers.size(), what,
                                "a replica of " + std::to_string(x.size())
                                  + " variables, tower 0's has "
                                  + std::to_string(y.size()));
            for (size_t j = 0; j < x.size(); ++j)
              if (x[j].name != y[j].name || x[j].value != y[j].value)
                return tower::bad_answer(k, self->state.towers.size(), what,
                                  "initial value of '" + x[j].name
                                    + "' differs from tower 0's");
          }
          return std::move(infos[0]);
        });
      return rp;
    },
    [=](params_atom, const parameter_set& values) -> caf::result<caf::ok_atom> {
      return to_every_tower(self, "params", params_atom::value, values);
    },
    [=](params_atom) -> caf::result<parameter_set> {
      // The replicas are identical: tower 0 speaks for all.
      return from_tower<parameter_set>(self, 0, "params (get)", [=](size_t k) {
        return self->request(self->state.towers[k], self->state.timeout,
                             params_atom::value);
      });
    },
    [=](optimizer_atom,
        const optimizer_config& opt) -> caf::result<caf::ok_atom> {
      return to_every_tower(self, "optimizer", optimizer_atom::value, opt);
    },
    [=](grads_atom, const batch& b) -> caf::result<step_result> {
      return split_steps(self, b, "grads", [&](size_t k, batch part) {
        return self->request(self->state.towers[k], self->state.timeout,
                             grads_atom::value, std::move(part));
      });
    },
    [=](grads_atom, const parameter_set& values,
        const batch& b) -> caf::result<step_result> {
      return split_steps(self, b, "grads", [&](size_t k, batch part) {
        return self->request(self->state.towers[k], self->state.timeout,
                             grads_atom::value, values, std::move(part));
      });
    },
    [=](grads_atom, const parameter_set& values,
        const std::vector<sparse_update>& rows,
        const batch& b) -> caf::result<step_result> {
      // Every tower's replica took the same earlier rows: each takes these.
      return split_steps(self, b, "grads", [&](size_t k, batch part) {
        return self->request(self->state.towers[k], self->state.timeout,
                             grads_atom::value, values, rows,
                             std::move(part));
      });
    },
    [=](grads_atom, const parameter_set& values, const batch& b,
        const stats_request& req) -> caf::result<step_result> {
      auto total = static_cast<int64_t>(b.labels.size());
      auto n = static_cast<int64_t>(self->state.towers.size());
      return split_steps(
        self, b, "grads with statistics", [&](size_t k, batch part) {
          bool skip = false;
          auto rk = tower::tower_request(req, total, n, static_cast<int64_t>(k),
                                  skip);
          // Both requests answer a step_result; without statistics its
          // stats_examples is 0 and combine_steps leaves it out.
          if (skip)
            return self->request(self->state.towers[k], self->state.timeout,
                                 grads_atom::value, values, std::move(part));
          return self->request(self->state.towers[k], self->state.timeout,
                               grads_atom::value, values, std::move(part),
                               rk);
        });
    },
    [=](stats_atom, const parameter_set& values, const batch& b,
        const stats_request& req) -> caf::result<stats_update> {
      const std::string what = "statistics";
      auto plan = tower::plan_split(b, self->state.towers.size(), what);
      if (!plan)
        return plan.error();
      auto n = static_cast<int64_t>(self->state.towers.size());
      auto shared_plan = std::make_shared<tower::split_plan>();
      shared_plan->total = plan->total;
      std::vector<stats_request> reqs;
      for (size_t i = 0; i < plan->towers.size(); ++i) {
        bool skip = false;
        auto rk = tower::tower_request(
          req, plan->total, n, static_cast<int64_t>(plan->towers[i]), skip);
        if (skip)
          continue;
        shared_plan->towers.push_back(plan->towers[i]);
        shared_plan->begin.push_back(plan->begin[i]);
        shared_plan->end.push_back(plan->end[i]);
        reqs.push_back(rk);
      }
      auto rp = self->make_response_promise<stats_update>();
      fan_out_parts<stats_update>(
        self, shared_plan, b, what, rp,
        [&](size_t k, size_t i, batch part) {
          return self->request(self->state.towers[k], self->state.timeout,
                               stats_atom::value, values, std::move(part),
                               reqs[i]);
        },
        [=](std::vector<stats_update>& us) {
          return tower::combine_stats_updates(self->state.towers.size(), what,
                                              shared_plan->towers, us);
        });
      return rp;
    },
    [=](invert_atom, const factor_set& factors,
        const kfac_config& kcfg) -> caf::result<inverse_set> {
      auto& st = self->state;
      auto k = st.next_invert;
      st.next_invert = (k + 1) % st.towers.size();
      return from_tower<inverse_set>(self, k, "invert", [&](size_t t) {
        return self->request(self->state.towers[t], self->state.timeout,
                             invert_atom::value, factors, kcfg);
      });
    },
    [=](train_atom, const batch&) -> caf::result<step_result> {
      return make_error(ec::unavailable,
                        "tower device: train is not supported (a local "
                        "optimizer step on each tower would apply only its "
                        "part's gradient and the replicas would drift "
                        "apart); multi-tower trains through the sync "
                        "runtime's grads requests");
    },
    [=](eval_atom, const batch& b) -> caf::result<eval_result> {
      const std::string what = "eval";
      auto plan = tower::plan_split(b, self->state.towers.size(), what);
      if (!plan)
        return plan.error();
      auto shared_plan
        = std::make_shared<const tower::split_plan>(std::move(*plan));
      auto rp = self->make_response_promise<eval_result>();
      fan_out_parts<eval_result>(
        self, shared_plan, b, what, rp,
        [&](size_t k, size_t, batch part) {
          return self->request(self->state.towers[k], self->state.timeout,
                               eval_atom::value, std::move(part));
        },
        [](std::vector<eval_result>& rs) -> caf::expected<eval_result> {
          eval_result out;
          for (const auto& r : rs)
            out += r;
          return out;
        });
      return rp;
    },
    [=](gemm_atom, const tensor& a, bool trans_a, const tensor& b,
        bool trans_b) -> caf::result<tensor> {
      return from_tower<tensor>(self, 0, "gemm", [&](size_t k) {
        return self->request(self->state.towers[k], self->state.timeout,
                             gemm_atom::value, a, trans_a, b, trans_b);
      });
    },
    [=](info_atom) -> caf::result<device_info> {
      auto rp = self->make_response_promise<device_info>();
      fan_out<device_info>(
        self, all_towers(self), "info", rp,
        [=](size_t k) {
          return self->request(self->state.towers[k], self->state.timeout,
                               info_atom::value);
        },
        [](std::vector<device_info>& xs) -> caf::expected<device_info> {
          device_info out;
          bool same = true;
          for (const auto& x : xs) {
            out.threads += x.threads;
            same = same && x.backend == xs[0].backend;
          }
          if (same) {
            out.backend = "towers(" + std::to_string(xs.size()) + " x "
                          + xs[0].backend + ")";
          } else {
            out.backend = "towers(";
            for (size_t k = 0; k < xs.size(); ++k)
              out.backend += (k > 0 ? ", " : "") + xs[k].backend;
            out.backend += ")";
          }
          return out;
        });
      return rp;
    },
  };
}

} // namespace

caf::error tower_device_config::validate() const {
  if (towers.empty())
    return make_error(ec::invalid_config,
                      "tower device: at least one tower is needed, got 0");
  for (size_t k = 0; k < towers.size(); ++k)
    if (!towers[k])
      return make_error(ec::invalid_config,
                        "tower device: tower " + std::to_string(k)
                          + " is an invalid actor handle");
  if (request_timeout.count() <= 0)
    return make_error(ec::invalid_config,
                      "tower device: request timeout must be positive, got "
                        + std::to_string(request_timeout.count()) + " ms");
  return caf::none;
}

caf::expected<device_actor>
spawn_tower_device(caf::actor_system& sys, std::vector<device_actor> towers,
                   std::chrono::milliseconds request_timeout) {
  return spawn_validated(sys, tower_device,
                         tower_device_config{std::move(towers),
                                             request_timeout});
}

} // namespace syncfac
