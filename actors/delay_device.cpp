#include "actors/delay_device.hpp"

#include "runtime/base/error.hpp"
#include "runtime/model.hpp"

namespace syncfac {

namespace {

using self_ptr = delay_device_actor::stateful_pointer<delay_device_state>;

caf::error not_here(const std::string& what) {
  return make_error(ec::unavailable,
                    "device bench_delay (benchmarks only) does not " + what);
}

/// Answers after the drawn delay with the device's gradients.
caf::result<step_result> delayed_gradients(self_ptr self, const batch& b) {
  auto& st = self->state;
  if (st.gradients.empty())
    return make_error(ec::invalid_argument,
                      "device bench_delay: no model loaded (send "
                      "load_model first)");
  auto wait = st.delay.draw(st.rng);
  step_result res;
  res.count = static_cast<int64_t>(b.labels.size());
  res.gradients = st.gradients;
  res.compute_s = std::chrono::duration<double>(wait).count();
  auto id = st.next_id++;
  auto promise = self->make_response_promise<step_result>();
  st.waiting.emplace(id, std::make_pair(promise, std::move(res)));
  self->delayed_send(self, wait, step_atom::value, id);
  return promise;
}

delay_device_actor::behavior_type delay_device(self_ptr self,
                                               compute_delay delay,
                                               uint64_t seed) {
  self->state.delay = delay;
  self->state.rng.seed(seed);
  return {
    [=](load_model_atom, const model_spec& spec,
        uint64_t seed) -> caf::result<model_info> {
      auto replica = model::make(spec, seed);
      if (!replica)
        return replica.error();
      auto& st = self->state;
      st.gradients = (*replica)->parameters();
      // Small values: a shard applying them keeps its variables finite
      // over any benchmark's steps.
      std::normal_distribution<float> noise{0.0f, 1e-3f};
      for (auto& g : st.gradients) {
        g.value = tensor{g.value.shape()};
        if (st.delay.random_gradients)
          for (auto& v : g.value.values())
            v = noise(st.rng);
      }
      return model_info{(*replica)->summary(),
                        value_count((*replica)->parameters()),
                        (*replica)->parameters()};
    },
    [=](params_atom, const parameter_set&) { return caf::ok_atom::value; },
    [=](params_atom) -> caf::result<parameter_set> {
      return not_here("keep parameters");
    },
    [=](optimizer_atom, const optimizer_config&) -> caf::result<caf::ok_atom> {
      return not_here("train locally");
    },
    [=](grads_atom, const batch& b) -> caf::result<step_result> {
      return delayed_gradients(self, b);
    },
    [=](grads_atom, const parameter_set&,
        const batch& b) -> caf::result<step_result> {
      return delayed_gradients(self, b);
    },
    [=](grads_atom, const parameter_set&, const std::vector<sparse_update>&,
        const batch& b) -> caf::result<step_result> {
      return delayed_gradients(self, b);
    },
    [=](grads_atom, const parameter_set&, const batch&,
        const stats_request&) -> caf::result<step_result> {
      return not_here("compute K-FAC statistics");
    },
    [=](stats_atom, const parameter_set&, const batch&,
        const stats_request&) -> caf::result<stats_update> {
      return not_here("compute K-FAC statistics");
    },
    [=](invert_atom, const factor_set&,
        const kfac_config&) -> caf::result<inverse_set> {
      return not_here("invert K-FAC factors");
    },
    [=](train_atom, const batch&) -> caf::result<step_result> {
      return not_here("train locally");
    },
    [=](eval_atom, const batch& b) -> eval_result {
      // Zero loss, nothing correct: an evaluation of a benchmark run
      // measures nothing.
      eval_result out;
      out.count = static_cast<int64_t>(b.labels.size());
      return out;
    },
    [=](gemm_atom, const tensor&, bool, const tensor&,
        bool) -> caf::result<tensor> {
      return not_here("run kernels");
    },
    [=](info_atom) { return device_info{"bench_delay", 0}; },
    [=](step_atom, uint64_t id) {
      auto& st = self->state;
      auto i = st.waiting.find(id);
      if (i == st.waiting.end())
        return;
      i->second.first.deliver(std::move(i->second.second));
      st.waiting.erase(i);
    },
  };
}

} // namespace

caf::expected<device_actor> spawn_delay_device(caf::actor_system& sys,
                                               const device_config& cfg) {
  auto delay = parse_compute_delay(cfg.backend);
  if (!delay)
    return delay.error();
  device_actor handle = sys.spawn(delay_device, *delay, cfg.seed);
  return handle;
}

} // namespace syncfac
