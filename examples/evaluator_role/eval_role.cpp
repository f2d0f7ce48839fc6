#include "eval_role.hpp"

#include <caf/typed_response_promise.hpp>

#include "actors/evaluate_slices.hpp"
#include "actors/gather.hpp"
#include "actors/spawn_validated.hpp"
#include "runtime/base/error.hpp"

namespace evaluator_role {

using namespace syncfac;

namespace {

using self_ptr = eval_role_actor::stateful_pointer<eval_role_state>;
using promise_type = caf::typed_response_promise<metrics_record>;

caf::error failed(const std::string& what, const caf::error& err) {
  if (err == caf::sec::request_timeout)
    return make_error(ec::timeout, "evaluator role: no answer to " + what
                                     + " in time");
  return with_context(err, "evaluator role: " + what);
}

/// Uploads `values` (every variable of the model, by name) to the device
/// and evaluates them as the variables of `step`.
void evaluate_values(self_ptr self, int64_t step, parameter_set values,
                     const std::string& origin, promise_type rp) {
  auto& st = self->state;
  std::vector<bool> seen(st.params.size(), false);
  for (auto& v : values) {
    auto i = st.slot_of.find(v.name);
    if (i == st.slot_of.end()) {
      rp.deliver(make_error(ec::unknown_name,
                            "evaluator role: " + origin + " holds '" + v.name
                              + "', which the model does not have"));
      return;
    }
    if (v.value.shape() != st.params[i->second].value.shape()) {
      rp.deliver(make_error(ec::shape_mismatch,
                            "evaluator role: " + origin + ": '" + v.name
                              + "' has shape " + to_string(v.value.shape())
                              + ", the model's "
                              + to_string(st.params[i->second].value.shape())));
      return;
    }
    st.params[i->second].value = std::move(v.value);
    seen[i->second] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i]) {
      rp.deliver(make_error(ec::unknown_name,
                            "evaluator role: " + origin + " lacks '"
                              + st.params[i].name + "'"));
      return;
    }
  evaluate_parameters(
    self, st.cfg.device, st.cfg.request_timeout, st.params, st.cfg.data,
    st.cfg.slice_size,
    [=](eval_result total) mutable {
      metrics_record rec;
      rec.source = self->state.cfg.source;
      rec.step = step;
      rec.fields["test_loss"] = total.mean_loss();
      rec.fields["test_accuracy"] = total.accuracy();
      rec.fields["examples"] = static_cast<double>(total.count);
      self->state.last = rec;
      rp.deliver(std::move(rec));
    },
    [=](const char* what, caf::error err) mutable {
      rp.deliver(failed(what, err));
    });
}

void evaluate_pulled(self_ptr self, std::vector<shard_params> pulled,
                     promise_type rp) {
  // Shards apply a step one after another: different steps mean an update
  // is in flight, and the variables would mix two steps.
  auto step = pulled.empty() ? 0 : pulled.front().global_step;
  for (const auto& sp : pulled)
    if (sp.global_step != step) {
      rp.deliver(make_error(ec::unavailable,
                            "evaluator role: ps:0 is at step "
                              + std::to_string(step) + ", ps:"
                              + std::to_string(sp.shard) + " at "
                              + std::to_string(sp.global_step)
                              + " (an update is in flight)"));
      return;
    }
  parameter_set values;
  for (auto& sp : pulled)
    for (auto& v : sp.values)
      values.push_back(std::move(v));
  evaluate_values(self, step, std::move(values), "the PS shards", rp);
}

/// Runs `then` once the device holds a model replica (its names and
/// shapes; the values are replaced by every evaluation's).
template <class F>
void with_model(self_ptr self, promise_type rp, F then) {
  auto& st = self->state;
  if (st.loaded) {
    then();
    return;
  }
  self->request(st.cfg.device, st.cfg.request_timeout, load_model_atom::value,
                st.cfg.model, uint64_t{0})
    .await(
      [=](model_info& info) mutable {
        auto& st = self->state;
        st.params = std::move(info.initial);
        for (size_t i = 0; i < st.params.size(); ++i)
          st.slot_of[st.params[i].name] = i;
        st.loaded = true;
        then();
      },
      [=](caf::error& err) mutable { rp.deliver(failed("model load", err)); });
}

void pull_and_evaluate(self_ptr self, std::vector<ps_actor> shards,
                       promise_type rp) {
  auto& st = self->state;
  gather<shard_params>(
    self, shards, st.cfg.request_timeout,
    [=](std::vector<shard_params> pulled) {
      evaluate_pulled(self, std::move(pulled), rp);
    },
    [=](size_t s, caf::error err) mutable {
      rp.deliver(failed("pull from ps:" + std::to_string(s), err));
    },
    pull_atom::value);
}

} // namespace

caf::error eval_role_config::validate() const {
  if (source.empty())
    return make_error(ec::invalid_config, "evaluator role: no source name");
  if (!data || data->count < 1)
    return make_error(ec::invalid_config,
                      "evaluator role: no evaluation data");
  if (!device)
    return make_error(ec::invalid_config, "evaluator role: no device actor");
  if (slice_size < 1 || request_timeout.count() <= 0)
    return make_error(ec::invalid_config, "evaluator role: slice size and "
                                          "request timeout must be positive");
  return model.validate();
}

eval_role_actor::behavior_type eval_role(self_ptr self, eval_role_config cfg) {
  self->state.cfg = std::move(cfg);
  self->state.last.source = self->state.cfg.source;
  self->state.last.step = -1;
  return {
    [=](eval_atom, std::vector<ps_actor>& shards)
      -> caf::result<metrics_record> {
      auto rp = self->make_response_promise<metrics_record>();
      if (shards.empty()) {
        rp.deliver(make_error(ec::invalid_argument,
                              "evaluator role: no PS shards to pull from"));
        return rp;
      }
      with_model(self, rp, [=] { pull_and_evaluate(self, shards, rp); });
      return rp;
    },
    [=](eval_atom, int64_t step, parameter_set& values)
      -> caf::result<metrics_record> {
      auto rp = self->make_response_promise<metrics_record>();
      auto shared = std::make_shared<parameter_set>(std::move(values));
      with_model(self, rp, [=] {
        evaluate_values(self, step, std::move(*shared), "the checkpoint", rp);
      });
      return rp;
    },
    [=](status_atom) { return self->state.last; },
  };
}

caf::expected<eval_role_actor> spawn_eval_role(caf::actor_system& sys,
                                               eval_role_config cfg) {
  return spawn_validated(sys, eval_role, std::move(cfg));
}

} // namespace evaluator_role
