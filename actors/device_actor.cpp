#include "actors/device_actor.hpp"

#include <algorithm>
#include <chrono>

#include <caf/event_based_actor.hpp>
#include <caf/spawn_options.hpp>

#include "actors/delay_device.hpp"
#include "actors/fatal_exception.hpp"
#include "kernels/backend_factory.hpp"
#include "kernels/cpu/kfac_inverse.hpp"
#include "messages/row_pull.hpp"
#include "runtime/elapsed.hpp"
#include "runtime/base/error.hpp"
#include "runtime/kfac/kfac_stats.hpp"
#include "runtime/kfac/kfac_update.hpp"
#include "runtime/kfac/layer_inversion.hpp"

namespace syncfac {

namespace {

using self_ptr = device_actor::stateful_pointer<device_state>;

/// Statistics passes of at most this many examples run on one thread.
constexpr int64_t few_stats_examples = 32;

caf::error refuse(self_ptr self, caf::error err) {
  ++self->state.refused;
  return err;
}

caf::error no_model() {
  return make_error(ec::invalid_argument,
                    "device: no model loaded (send load_model first)");
}

/// Overwrites the loaded replica's parameters with `values` (a pull from
/// the PS); an error without a replica or when they do not fit it.
caf::error set_replica_parameters(device_state& st,
                                  const parameter_set& values) {
  if (!st.replica)
    return no_model();
  return st.replica->set_parameters(values);
}

/// Overwrites the named variables of the replica (some of them) and the
/// given rows of its tables, whose other rows stay as earlier requests
/// left them: a row-pulling worker's step, which copies no table
/// (messages/row_pull.hpp). The named variables are checked before any
/// changes; a bad row block is refused naming its variable (the worker
/// then fails, so a replica left half-updated is never used).
caf::error set_replica_rows(device_state& st, const parameter_set& values,
                            const std::vector<sparse_update>& rows) {
  if (!st.replica)
    return no_model();
  auto& params = st.replica->parameters();
  auto find = [&](const std::string& name) -> named_tensor* {
    for (auto& p : params)
      if (p.name == name)
        return &p;
    return nullptr;
  };
  std::vector<named_tensor*> targets;
  for (const auto& v : values) {
    auto* p = find(v.name);
    if (p == nullptr)
      return make_error(ec::unknown_name, "device: parameters: "
                                            + in_quotes(v.name)
                                            + " is no variable of the model");
    if (v.value.shape() != p->value.shape())
      return make_error(ec::shape_mismatch,
                        "device: parameters: " + in_quotes(v.name)
                          + " has shape " + v.value.shape_string()
                          + ", expected " + p->value.shape_string());
    if (!v.value.all_finite())
      return make_error(ec::non_finite, "device: parameters: "
                                          + in_quotes(v.name)
                                          + " holds NaN or Inf");
    targets.push_back(p);
  }
  for (size_t i = 0; i < values.size(); ++i)
    targets[i]->value.values() = values[i].value.values();
  for (const auto& r : rows) {
    auto* p = find(r.variable);
    if (p == nullptr)
      return make_error(ec::unknown_name, "device: rows of "
                                            + in_quotes(r.variable)
                                            + ", which is no variable of "
                                              "the model");
    if (!r.rows.all_finite())
      return make_error(ec::non_finite, "device: rows of "
                                          + in_quotes(r.variable)
                                          + " hold NaN or Inf");
    if (auto err = scatter_rows(r, p->value))
      return with_context(err, "device");
  }
  return caf::none;
}

/// The replica's gradients as a worker pushes them: an embedding table's
/// as its touched rows (a sparse push), every other one dense.
void split_gradients(const model& replica, parameter_set& dense,
                     std::vector<sparse_update>& sparse) {
  auto sparse_vars = replica.sparse_gradient_rows();
  for (const auto& g : replica.gradients()) {
    auto it = std::find_if(sparse_vars.begin(), sparse_vars.end(),
                           [&](const auto& x) { return x.variable == g.name; });
    if (it == sparse_vars.end()) {
      dense.push_back(g);
      continue;
    }
    auto width = g.value.size() / std::max<int64_t>(g.value.dim(0), 1);
    sparse_update u;
    u.variable = g.name;
    u.indices = *it->rows;
    u.rows.resize({static_cast<int64_t>(u.indices.size()), width});
    for (size_t k = 0; k < u.indices.size(); ++k)
      std::copy(g.value.data() + u.indices[k] * width,
                g.value.data() + (u.indices[k] + 1) * width,
                u.rows.data() + static_cast<int64_t>(k) * width);
    sparse.push_back(std::move(u));
  }
}

/// Forward + backward on b at the replica's parameters.
caf::expected<step_result>
compute_gradients(self_ptr self, const batch& b,
                  std::chrono::steady_clock::time_point t0) {
  auto& st = self->state;
  st.replica->set_noise_seed(b.noise_seed);
  auto res = st.replica->forward_backward(*st.dev, b.images, b.labels);
  if (!res)
    return res.error();
  step_result out{static_cast<float>(res->mean_loss()), res->correct,
                  res->count, {}, {}, seconds_since(t0), {}, 0};
  split_gradients(*st.replica, out.gradients, out.sparse_gradients);
  return out;
}

caf::result<step_result> gradients_of(self_ptr self, const batch& b,
                                      std::chrono::steady_clock::time_point t0
                                      = std::chrono::steady_clock::now()) {
  if (!self->state.replica)
    return refuse(self, no_model());
  auto res = compute_gradients(self, b, t0);
  if (!res)
    return refuse(self, res.error());
  return std::move(*res);
}

/// Factor statistics of `b` under `req`. With the empirical Fisher and
/// `after_gradients`, the gradient pass just run on b already holds them;
/// otherwise a backward pass on the first max_examples examples, against
/// targets drawn from the model (sampled Fisher) or the labels, that
/// computes pre-activation gradients only (no parameter gradients). Its
/// forward activations are those of the gradient pass just run on b
/// (`after_gradients`: same parameters, the examples a prefix of b), or a
/// forward pass of their own.
caf::expected<std::vector<layer_stats>>
statistics_of(self_ptr self, const batch& b, const stats_request& req,
              bool after_gradients, int64_t& examples) {
  auto& st = self->state;
  auto& m = *st.replica;
  auto sampling = req.sampling;
  // Fresh locations every request: a fixed seed would pick the same ones
  // forever and bias the factors.
  sampling.seed = req.sampling.seed + 0x9e3779b97f4a7c15ULL * ++st.stats_requests;
  auto total = static_cast<int64_t>(b.labels.size());
  auto used = sampling.max_examples > 0
                ? std::min(sampling.max_examples, total) : total;
  examples = used;
  if (req.fisher == fisher_type::empirical && after_gradients)
    return layer_statistics(m.kfac_layers(), sampling, st.dev->threads(),
                            req.rows, *st.inverter);
  // A replica of its own for the statistics pass: its activations keep
  // the statistics batch's size, where running the smaller batch through
  // the main replica would reallocate every activation twice per step.
  if (!st.stats_replica) {
    auto made = model::make(m.spec(), 0);
    if (!made)
      return made.error();
    st.stats_replica = std::move(*made);
  }
  // On a CPU device a pass of few examples runs on one thread: it makes
  // dozens of parallel regions of microseconds each, and every one of
  // them waits for the team's other thread, which on loaded cores can
  // take a whole time slice (measured: 32-38 ms per 16-example pass at
  // load 5, a third of the 128-example gradient pass).
  if (!st.stats_dev)
    st.stats_dev = st.dev->name() == "cpu" && st.dev->threads() > 1
                     ? std::shared_ptr<backend>(make_cpu_backend(1))
                     : st.dev;
  auto& dev = used <= few_stats_examples ? *st.stats_dev : *st.dev;
  auto& sm = *st.stats_replica;
  if (auto err = sm.set_parameters(m.parameters()))
    return err;
  // The statistics pass keeps pointers to its input: `part` must live
  // until layer_statistics has read it.
  batch part;
  if (after_gradients) {
    if (auto err = sm.adopt_forward(m, used))
      return err;
    // Only the sampled Fisher gets here: the empirical one returned above.
    if (auto err = sm.backward_sampled(dev, st.rng, false))
      return err;
  } else {
    part = batch_prefix(b, used);
    sm.set_noise_seed(b.noise_seed);
    if (auto res = sm.forward(dev, part.images, part.labels); !res)
      return res.error();
    if (auto err = req.fisher == fisher_type::sampled
                     ? sm.backward_sampled(dev, st.rng, false)
                     : sm.backward(dev, part.labels, false))
      return err;
  }
  sampling.max_examples = 0;
  // stats_dev is a CPU backend exactly when dev is, so the device's
  // kernels fit either.
  return layer_statistics(sm.kfac_layers(), sampling, dev.threads(),
                          req.rows, *st.inverter);
}

/// One step of the seeds' single-machine K-FAC: gradients of the batch,
/// its statistics (as a worker would send them) folded into the factors,
/// inverses every invert_every steps, then the K-FAC update
/// (runtime/kfac/kfac_update.hpp) — the same code the PS shards run.
caf::result<step_result> kfac_step(self_ptr self, const batch& b,
                                   std::chrono::steady_clock::time_point t0) {
  auto& st = self->state;
  auto& m = *st.replica;
  const auto& cfg = st.local_optimizer->config();
  if (!st.kfac) {
    auto made = kfac_preconditioner::make(
      cfg.kfac, m.kfac_collection().layers, m.parameters());
    if (!made)
      return refuse(self, made.error());
    st.kfac = std::move(*made);
  }
  auto res = compute_gradients(self, b, t0);
  if (!res)
    return refuse(self, res.error());
  std::vector<tensor> grads;
  for (auto& g : res->gradients)
    grads.push_back(std::move(g.value));
  // Statistics on steps 0, k, 2k, ... (k = stats_every): the factors'
  // moving average changes slowly, the statistics pass does not.
  auto step = st.kfac_steps++;
  if (step % cfg.kfac.stats_every == 0) {
    stats_request req{cfg.kfac.fisher, cfg.kfac.sampling};
    int64_t examples = 0;
    auto stats = statistics_of(self, b, req, true, examples);
    if (!stats)
      return refuse(self, stats.error());
    if (auto err = st.kfac->update_factors(*stats))
      return refuse(self, std::move(err));
  }
  // A layer that fails to invert keeps its previous inverse (or plain
  // momentum): the step goes on, as on a PS shard.
  if ((step + 1) % cfg.kfac.invert_every == 0)
    (void) st.kfac->update_inverses(*st.inverter, st.dev->threads());
  // The layers' products side by side on the device's threads (each
  // product runs on one thread: kfac_inverse.hpp).
  st.local_optimizer->set_global_step(step);
  st.local_optimizer->clip_to_global_norm(
    grads.size(), [&](size_t i) -> const tensor& { return grads[i]; });
  auto info = kfac_apply(*st.local_optimizer, m.parameters(), grads,
                         st.kfac->slots(), *st.inverter, {},
                         st.dev->threads());
  if (!info)
    return refuse(self, info.error());
  return step_result{res->loss, res->correct, res->count, {}, {},
                     seconds_since(t0), {}, 0};
}

} // namespace

caf::error device_config::validate() const {
  if (threads < 1)
    return make_error(ec::invalid_config,
                      "device: threads must be at least 1, got "
                        + std::to_string(threads));
  if (backend.empty())
    return make_error(ec::invalid_config, "device: backend name is empty");
  return caf::none;
}

device_actor::behavior_type device(self_ptr self,
                                   std::shared_ptr<backend> dev,
                                   std::shared_ptr<kfac_inverter> inverter,
                                   uint64_t seed) {
  end_program_on_exception(self, "device");
  self->state.dev = std::move(dev);
  self->state.inverter = std::move(inverter);
  self->state.rng.seed(seed);
  return {
    [=](load_model_atom, const model_spec& spec,
        uint64_t seed) -> caf::result<model_info> {
      auto replica = model::make(spec, seed);
      if (!replica)
        return refuse(self, replica.error());
      auto& st = self->state;
      st.replica = std::move(*replica);
      st.stats_replica.reset();
      st.local_optimizer.reset();
      st.kfac.reset();
      st.kfac_steps = 0;
      return model_info{st.replica->summary(),
                        value_count(st.replica->parameters()),
                        st.replica->parameters()};
    },
    [=](params_atom, const parameter_set& values) -> caf::result<caf::ok_atom> {
      if (auto err = set_replica_parameters(self->state, values))
        return refuse(self, std::move(err));
      return caf::ok_atom::value;
    },
    [=](params_atom) -> caf::result<parameter_set> {
      auto& st = self->state;
      if (!st.replica)
        return refuse(self, no_model());
      return st.replica->parameters();
    },
    [=](optimizer_atom,
        const optimizer_config& cfg) -> caf::result<caf::ok_atom> {
      auto& st = self->state;
      if (!st.replica)
        return refuse(self, no_model());
      auto opt = optimizer::make(cfg, st.replica->parameters());
      if (!opt)
        return refuse(self, opt.error());
      st.local_optimizer = std::move(*opt);
      st.kfac.reset();
      st.kfac_steps = 0;
      return caf::ok_atom::value;
    },
    [=](grads_atom, const batch& b) -> caf::result<step_result> {
      return gradients_of(self, b);
    },
    [=](grads_atom, const parameter_set& values,
        const batch& b) -> caf::result<step_result> {
      auto t0 = std::chrono::steady_clock::now();
      if (auto err = set_replica_parameters(self->state, values))
        return refuse(self, std::move(err));
      return gradients_of(self, b, t0);
    },
    [=](grads_atom, const parameter_set& values,
        const std::vector<sparse_update>& rows,
        const batch& b) -> caf::result<step_result> {
      auto t0 = std::chrono::steady_clock::now();
      if (auto err = set_replica_rows(self->state, values, rows))
        return refuse(self, std::move(err));
      return gradients_of(self, b, t0);
    },
    [=](grads_atom, const parameter_set& values, const batch& b,
        const stats_request& req) -> caf::result<step_result> {
      auto t0 = std::chrono::steady_clock::now();
      if (auto err = set_replica_parameters(self->state, values))
        return refuse(self, std::move(err));
      auto res = compute_gradients(self, b, t0);
      if (!res)
        return refuse(self, res.error());
      auto& out = *res;
      auto stats = statistics_of(self, b, req, true, out.stats_examples);
      if (!stats)
        return refuse(self, stats.error());
      out.stats = std::move(*stats);
      out.compute_s = seconds_since(t0);
      return std::move(out);
    },
    [=](stats_atom, const parameter_set& values, const batch& b,
        const stats_request& req) -> caf::result<stats_update> {
      if (auto err = set_replica_parameters(self->state, values))
        return refuse(self, std::move(err));
      stats_update out;
      auto stats = statistics_of(self, b, req, false, out.examples);
      if (!stats)
        return refuse(self, stats.error());
      out.layers = std::move(*stats);
      return out;
    },
    [=](invert_atom, const factor_set& factors,
        const kfac_config& cfg) -> caf::result<inverse_set> {
      if (auto err = cfg.validate())
        return refuse(self, std::move(err));
      return invert_factors(factors, cfg, *self->state.inverter);
    },
    [=](train_atom, const batch& b) -> caf::result<step_result> {
      auto t0 = std::chrono::steady_clock::now();
      auto& st = self->state;
      if (!st.replica)
        return refuse(self, no_model());
      if (!st.local_optimizer)
        return refuse(self, make_error(ec::invalid_argument,
                                       "device: no optimizer configured "
                                       "(send an optimizer_config first)"));
      if (st.local_optimizer->config().kind == optimizer_kind::kfac)
        return kfac_step(self, b, t0);
      st.replica->set_noise_seed(b.noise_seed);
      auto res = st.replica->forward_backward(*st.dev, b.images, b.labels);
      if (!res)
        return refuse(self, res.error());
      if (auto err = st.local_optimizer->apply(st.replica->parameters(),
                                               st.replica->gradients()))
        return refuse(self, std::move(err));
      return step_result{static_cast<float>(res->mean_loss()), res->correct,
                         res->count, {}, {}, seconds_since(t0), {}, 0};
    },
    [=](eval_atom, const batch& b) -> caf::result<eval_result> {
      auto& st = self->state;
      if (!st.replica)
        return refuse(self, no_model());
      auto res = st.replica->evaluate(*st.dev, b.images, b.labels);
      if (!res)
        return refuse(self, res.error());
      return *res;
    },
    [=](gemm_atom, const tensor& a, bool trans_a, const tensor& b,
        bool trans_b) -> caf::result<tensor> {
      tensor c;
      if (auto err = self->state.dev->gemm(a, trans_a, b, trans_b, 1.0f, 0.0f,
                                           c))
        return refuse(self, std::move(err));
      return c;
    },
    [=](info_atom) -> device_info {
      return device_info{self->state.dev->name(), self->state.dev->threads()};
    },
  };
}

caf::expected<device_actor> spawn_device(caf::actor_system& sys,
                                         const device_config& cfg) {
  if (auto err = cfg.validate())
    return err;
  if (is_delay_device(cfg.backend))
    return spawn_delay_device(sys, cfg);
  // cfg.backend is a device: cpu, gpu:N or auto (kernels/backend_factory).
  auto dev = make_device_backend(cfg.backend, cfg.threads);
  if (!dev)
    return dev.error();
  auto inverter = make_kfac_inverter(*dev);
  if (!inverter)
    return inverter.error();
  return sys.spawn<caf::detached>(device, std::move(*dev),
                                  std::move(*inverter), cfg.seed);
}

} // namespace syncfac
