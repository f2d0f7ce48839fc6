#include "actors/evaluator.hpp"

#include <algorithm>

#include <caf/typed_response_promise.hpp>

#include "actors/evaluate_slices.hpp"
#include "actors/fatal_exception.hpp"
#include "actors/gather.hpp"
#include "actors/spawn_validated.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

using self_ptr = evaluator_actor::stateful_pointer<evaluator_state>;
using promise_type = caf::typed_response_promise<eval_result>;

caf::error failed(const std::string& what, caf::error err) {
  if (err == caf::sec::request_timeout)
    return make_error(ec::timeout, "evaluator: no answer to " + what
                                     + " in time");
  return make_error(ec::peer_down, "evaluator: " + what + " failed: "
                                     + render(err));
}

/// Answers `rp` and tells on_answered.
template <class Answer>
void answer(self_ptr self, promise_type& rp, Answer&& x) {
  rp.deliver(std::forward<Answer>(x));
  if (self->state.cfg.on_answered)
    self->state.cfg.on_answered();
}

/// The shards apply a round one after another, so a pull can find one a
/// step ahead of another; the next pull finds them together (the next
/// round waits for a worker's compute). Pulls this many times before
/// refusing to evaluate variables of two steps.
constexpr int max_pulls = 5;

void pull_and_evaluate(self_ptr self, promise_type rp, int pulls = 1);

void evaluate_pulled(self_ptr self, std::vector<shard_params> pulled,
                     promise_type rp, int pulls) {
  auto& st = self->state;
  auto [low, high] = std::minmax_element(
    pulled.begin(), pulled.end(), [](const auto& a, const auto& b) {
      return a.global_step < b.global_step;
    });
  if (low->global_step != high->global_step) {
    if (pulls < max_pulls)
      return pull_and_evaluate(self, rp, pulls + 1);
    return answer(self, rp,
                  make_error(ec::timeout,
                             "evaluator: ps:" + std::to_string(low->shard)
                               + " at global step "
                               + std::to_string(low->global_step) + " and ps:"
                               + std::to_string(high->shard) + " at "
                               + std::to_string(high->global_step)
                               + " in each of " + std::to_string(max_pulls)
                               + " pulls"));
  }
  auto step = low->global_step;
  for (auto& sp : pulled)
    for (auto& v : sp.values) {
      auto i = st.slot_of.find(v.name);
      if (i == st.slot_of.end()) {
        return answer(self, rp,
                      make_error(ec::unknown_name,
                                 "evaluator: ps:" + std::to_string(sp.shard)
                                   + " holds unknown '" + v.name + "'"));
      }
      st.params[i->second].value = std::move(v.value);
    }
  evaluate_parameters(
    self, st.cfg.device, st.cfg.request_timeout, st.params, st.cfg.data,
    st.cfg.slice_size,
    [=](eval_result total) mutable {
      const auto& on_result = self->state.cfg.on_result;
      if (on_result)
        on_result(step, total);
      answer(self, rp, total);
    },
    [=](const char* what, caf::error err) mutable {
      answer(self, rp, failed(what, std::move(err)));
    });
}

void pull_and_evaluate(self_ptr self, promise_type rp, int pulls) {
  auto& st = self->state;
  auto done = [=](std::vector<shard_params> pulled) {
    evaluate_pulled(self, std::move(pulled), rp, pulls);
  };
  auto failed_pull = [=](size_t s, caf::error err) mutable {
    answer(self, rp, failed("pull from ps:" + std::to_string(s),
                            std::move(err)));
  };
  if (st.cfg.use_averages)
    gather<shard_params>(self, st.cfg.shards, st.cfg.request_timeout, done,
                         failed_pull, pull_atom::value, average_atom::value);
  else
    gather<shard_params>(self, st.cfg.shards, st.cfg.request_timeout, done,
                         failed_pull, pull_atom::value);
}

} // namespace

caf::error evaluator_config::validate() const {
  if (!data || data->count < 1)
    return make_error(ec::invalid_config, "evaluator: no evaluation data");
  if (!device)
    return make_error(ec::invalid_config, "evaluator: no device actor");
  if (shards.empty())
    return make_error(ec::invalid_config, "evaluator: no PS shards");
  if (slice_size < 1 || request_timeout.count() <= 0)
    return make_error(ec::invalid_config,
                      "evaluator: slice size and timeout must be positive");
  return model.validate();
}

namespace {

evaluator_actor::behavior_type evaluator(self_ptr self,
                                         evaluator_config cfg) {
  end_program_on_exception(self, "evaluator");
  self->state.cfg = std::move(cfg);
  return {
    [=](rewire_atom, std::vector<ps_actor>& shards) {
      if (shards.size() == self->state.cfg.shards.size())
        self->state.cfg.shards = std::move(shards);
    },
    [=](eval_atom, int64_t) -> caf::result<eval_result> {
      // The step asked for is where the shards were when the request was
      // sent; they are there or further on now.
      auto rp = self->make_response_promise<eval_result>();
      auto& st = self->state;
      if (st.loaded) {
        pull_and_evaluate(self, rp);
        return rp;
      }
      self->request(st.cfg.device, st.cfg.request_timeout,
                    load_model_atom::value, st.cfg.model, uint64_t{0})
        .await(
          [=](model_info& info) {
            auto& st = self->state;
            st.params = std::move(info.initial);
            for (size_t i = 0; i < st.params.size(); ++i)
              st.slot_of[st.params[i].name] = i;
            st.loaded = true;
            pull_and_evaluate(self, rp);
          },
          [=](caf::error& err) mutable {
            answer(self, rp, failed("model load", std::move(err)));
          });
      return rp;
    },
  };
}

} // namespace

caf::expected<evaluator_actor> spawn_evaluator(caf::actor_system& sys,
                                               evaluator_config cfg) {
  return spawn_validated(sys, evaluator, std::move(cfg));
}

} // namespace syncfac
