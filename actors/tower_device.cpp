#include "actors/tower_device.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/fatal_exception.hpp"
#include "actors/spawn_validated.hpp"
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

std::string who(self_ptr self, size_t k) {
  return "tower device: tower " + std::to_string(k) + " of "
         + std::to_string(self->state.towers.size());
}

/// A tower's failure as the answer to the whole request: names the tower
/// and the request, keeps the tower's error code (a timeout or a tower
/// that is gone become ec::timeout and ec::peer_down).
caf::error tower_failed(self_ptr self, size_t k, const std::string& what,
                        const caf::error& err) {
  auto prefix = who(self, k) + " (" + what + ")";
  if (err == caf::sec::request_timeout)
    return make_error(ec::timeout,
                      prefix + ": no answer within "
                        + std::to_string(self->state.timeout.count())
                        + " ms");
  if (err.category() != error_category)
    return make_error(ec::peer_down, prefix + ": " + render(err));
  return with_context(err, prefix);
}

/// A malformed answer of tower k (replicas that disagree, a count other
/// than the examples sent): refused whole.
caf::error bad_answer(self_ptr self, size_t k, const std::string& what,
                      const std::string& why) {
  return make_error(ec::bad_message, who(self, k) + " (" + what + "): " + why);
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

/// How a batch is split: the towers that get examples and their ranges.
struct split_plan {
  int64_t total = 0;
  std::vector<size_t> towers;
  std::vector<int64_t> begin;
  std::vector<int64_t> end;

  int64_t examples(size_t i) const {
    return end[i] - begin[i];
  }
};

caf::expected<split_plan> plan_split(self_ptr self, const batch& b,
                                     const std::string& what) {
  split_plan plan;
  plan.total = static_cast<int64_t>(b.labels.size());
  // Slicing trusts the images' first dimension, so check it first (a
  // single device would refuse such a batch too).
  if (b.images.rank() < 1 || b.images.dim(0) != plan.total)
    return make_error(ec::shape_mismatch,
                      "tower device (" + what + "): batch of "
                        + std::to_string(plan.total) + " labels but images "
                        + b.images.shape_string());
  auto n = static_cast<int64_t>(self->state.towers.size());
  if (plan.total == 0) {
    // Nothing to split: tower 0 answers as a single device would.
    plan.towers = {0};
    plan.begin = {0};
    plan.end = {0};
    return plan;
  }
  for (int64_t k = 0; k < n; ++k) {
    auto [from, to] = tower::part_range(plan.total, n, k);
    if (to == from)
      continue;
    plan.towers.push_back(static_cast<size_t>(k));
    plan.begin.push_back(from);
    plan.end.push_back(to);
  }
  return plan;
}

/// The statistics request for tower k: its share of max_examples (0: the
/// tower computes no statistics) and its own location seed.
stats_request tower_request(const stats_request& req, int64_t total,
                            int64_t towers, int64_t k, bool& skip) {
  auto out = req;
  // Matrices from every tower: combine_stats averages matrices.
  out.rows = false;
  skip = false;
  auto m = req.sampling.max_examples;
  if (m > 0 && m < total) {
    // Split m like the batch: m_k <= n_k because both use the same rule.
    auto [from, to] = tower::part_range(m, towers, k);
    out.sampling.max_examples = to - from;
    skip = to == from;
  } else {
    out.sampling.max_examples = 0;
  }
  // Without the mix, every tower would draw the same conv locations for
  // its k-th example (the towers' seeds advance in step).
  out.sampling.seed = req.sampling.seed
                      ^ (0xbf58476d1ce4e5b9ULL * static_cast<uint64_t>(k));
  return out;
}

/// x += w * y over equally shaped tensors.
void add_scaled(tensor& x, const tensor& y, float w) {
  auto* xs = x.data();
  const auto* ys = y.data();
  for (int64_t i = 0; i < x.size(); ++i)
    xs[i] += w * ys[i];
}

void scale(tensor& x, float w) {
  for (auto& v : x.values())
    v *= w;
}

/// Σ_k w_k x_k over the towers' statistics, Σ w_k = 1; every tower must
/// report the same layers with the same shapes, in the same order.
caf::expected<std::vector<layer_stats>>
combine_stats(self_ptr self, const std::string& what,
              const std::vector<size_t>& towers,
              std::vector<std::vector<layer_stats>*> stats,
              const std::vector<int64_t>& examples) {
  int64_t total = 0;
  for (auto e : examples)
    total += e;
  if (stats.empty() || total == 0)
    return std::vector<layer_stats>{};
  if (stats.size() == 1)
    return std::move(*stats[0]);
  auto out = std::move(*stats[0]);
  auto w0 = static_cast<float>(static_cast<double>(examples[0])
                               / static_cast<double>(total));
  for (auto& l : out) {
    scale(l.a, w0);
    scale(l.g, w0);
  }
  for (size_t i = 1; i < stats.size(); ++i) {
    auto& s = *stats[i];
    if (s.size() != out.size())
      return bad_answer(self, towers[i], what,
                        "statistics of " + std::to_string(s.size())
                          + " layers, tower " + std::to_string(towers[0])
                          + " sent " + std::to_string(out.size()));
    auto w = static_cast<float>(static_cast<double>(examples[i])
                                / static_cast<double>(total));
    for (size_t j = 0; j < out.size(); ++j) {
      if (s[j].layer != out[j].layer || s[j].a.shape() != out[j].a.shape()
          || s[j].g.shape() != out[j].g.shape())
        return bad_answer(self, towers[i], what,
                          "statistics of layer '" + s[j].layer + "' A "
                            + s[j].a.shape_string() + " G "
                            + s[j].g.shape_string() + " where tower "
                            + std::to_string(towers[0]) + " sent '"
                            + out[j].layer + "' A " + out[j].a.shape_string()
                            + " G " + out[j].g.shape_string());
      add_scaled(out[j].a, s[j].a, w);
      add_scaled(out[j].g, s[j].g, w);
    }
  }
  return out;
}

/// Σ_k w_k · sparse_k, rows of equal index summed, indices ascending.
caf::expected<std::vector<sparse_update>>
merge_sparse(self_ptr self, const std::string& what,
             const std::vector<size_t>& towers,
             std::vector<step_result>& rs, const std::vector<float>& w) {
  struct merged {
    tensor_shape row_shape;
    int64_t width = 0;
    std::map<int64_t, std::vector<float>> rows;
  };
  std::vector<std::string> order;
  std::map<std::string, merged> by_name;
  for (size_t i = 0; i < rs.size(); ++i) {
    for (auto& u : rs[i].sparse_gradients) {
      auto n = static_cast<int64_t>(u.indices.size());
      if (u.rows.rank() < 1 || u.rows.dim(0) != n)
        return bad_answer(self, towers[i], what,
                          "sparse gradient of '" + u.variable + "' has "
                            + std::to_string(n) + " indices but rows "
                            + u.rows.shape_string());
      tensor_shape row_shape(u.rows.shape().begin() + 1, u.rows.shape().end());
      auto [it, fresh] = by_name.try_emplace(u.variable);
      auto& m = it->second;
      if (fresh) {
        order.push_back(u.variable);
        m.row_shape = row_shape;
        m.width = element_count(row_shape);
      } else if (m.row_shape != row_shape) {
        return bad_answer(self, towers[i], what,
                          "sparse gradient of '" + u.variable
                            + "' has rows " + to_string(row_shape)
                            + " where another tower's are "
                            + to_string(m.row_shape));
      }
      for (int64_t r = 0; r < n; ++r) {
        auto& row = m.rows[u.indices[static_cast<size_t>(r)]];
        row.resize(static_cast<size_t>(m.width), 0.0f);
        const auto* src = u.rows.data() + r * m.width;
        for (int64_t c = 0; c < m.width; ++c)
          row[static_cast<size_t>(c)] += w[i] * src[c];
      }
    }
  }
  std::vector<sparse_update> out;
  for (const auto& name : order) {
    auto& m = by_name.at(name);
    sparse_update u;
    u.variable = name;
    auto shape = m.row_shape;
    shape.insert(shape.begin(), static_cast<int64_t>(m.rows.size()));
    u.rows = tensor(shape);
    int64_t r = 0;
    for (auto& [index, row] : m.rows) {
      u.indices.push_back(index);
      std::copy(row.begin(), row.end(), u.rows.data() + r * m.width);
      ++r;
    }
    out.push_back(std::move(u));
  }
  return out;
}

/// The batch's step_result from the towers' (see the header).
caf::expected<step_result> combine_steps(self_ptr self,
                                         const std::string& what,
                                         const split_plan& plan,
                                         std::vector<step_result>& rs) {
  for (size_t i = 0; i < rs.size(); ++i)
    if (rs[i].count != plan.examples(i))
      return bad_answer(self, plan.towers[i], what,
                        "answered for " + std::to_string(rs[i].count)
                          + " examples, was sent "
                          + std::to_string(plan.examples(i)));
  if (rs.size() == 1)
    return std::move(rs[0]);
  auto total = static_cast<double>(plan.total);
  std::vector<float> w(rs.size());
  for (size_t i = 0; i < rs.size(); ++i)
    w[i] = static_cast<float>(static_cast<double>(plan.examples(i)) / total);
  step_result out;
  double loss = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    loss += static_cast<double>(plan.examples(i)) * rs[i].loss;
    out.correct += rs[i].correct;
    out.count += rs[i].count;
    out.compute_s = std::max(out.compute_s, rs[i].compute_s);
  }
  out.loss = static_cast<float>(loss / total);
  out.gradients = std::move(rs[0].gradients);
  for (auto& g : out.gradients)
    scale(g.value, w[0]);
  for (size_t i = 1; i < rs.size(); ++i) {
    auto& gs = rs[i].gradients;
    if (gs.size() != out.gradients.size())
      return bad_answer(self, plan.towers[i], what,
                        std::to_string(gs.size()) + " gradients, tower "
                          + std::to_string(plan.towers[0]) + " sent "
                          + std::to_string(out.gradients.size()));
    for (size_t j = 0; j < gs.size(); ++j) {
      auto& x = out.gradients[j];
      if (gs[j].name != x.name || gs[j].value.shape() != x.value.shape())
        return bad_answer(self, plan.towers[i], what,
                          "gradient '" + gs[j].name + "' "
                            + gs[j].value.shape_string() + " where tower "
                            + std::to_string(plan.towers[0]) + " sent '"
                            + x.name + "' " + x.value.shape_string());
      add_scaled(x.value, gs[j].value, w[i]);
    }
  }
  auto sparse = merge_sparse(self, what, plan.towers, rs, w);
  if (!sparse)
    return sparse.error();
  out.sparse_gradients = std::move(*sparse);
  // Statistics: only the towers that computed some.
  std::vector<size_t> with_stats;
  std::vector<std::vector<layer_stats>*> stats;
  std::vector<int64_t> examples;
  for (size_t i = 0; i < rs.size(); ++i) {
    if (rs[i].stats_examples <= 0)
      continue;
    with_stats.push_back(plan.towers[i]);
    stats.push_back(&rs[i].stats);
    examples.push_back(rs[i].stats_examples);
    out.stats_examples += rs[i].stats_examples;
  }
  auto combined = combine_stats(self, what, with_stats, std::move(stats),
                                examples);
  if (!combined)
    return combined.error();
  out.stats = std::move(*combined);
  return out;
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

/// Splits `b`, sends each tower its part through make(k, part) and
/// answers with the combined step_result.
template <class Make>
caf::result<step_result> split_steps(self_ptr self, const batch& b,
                                     const std::string& what, Make make) {
  auto plan = plan_split(self, b, what);
  if (!plan)
    return plan.error();
  auto rp = self->make_response_promise<step_result>();
  auto shared_plan = std::make_shared<split_plan>(std::move(*plan));
  std::vector<size_t> index_of(self->state.towers.size());
  for (size_t i = 0; i < shared_plan->towers.size(); ++i)
    index_of[shared_plan->towers[i]] = i;
  fan_out<step_result>(
    self, shared_plan->towers, what, rp,
    [=, &b](size_t k) {
      auto i = index_of[k];
      return make(k, tower::batch_range(b, shared_plan->begin[i],
                                        shared_plan->end[i]));
    },
    [=](std::vector<step_result>& rs) {
      return combine_steps(self, what, *shared_plan, rs);
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
              return bad_answer(self, k, what,
                                "a replica of " + std::to_string(x.size())
                                  + " variables, tower 0's has "
                                  + std::to_string(y.size()));
            for (size_t j = 0; j < x.size(); ++j)
              if (x[j].name != y[j].name || x[j].value != y[j].value)
                return bad_answer(self, k, what,
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
      auto rp = self->make_response_promise<parameter_set>();
      fan_out<parameter_set>(
        self, {0}, "params (get)", rp,
        [=](size_t k) {
          return self->request(self->state.towers[k], self->state.timeout,
                               params_atom::value);
        },
        [](std::vector<parameter_set>& xs) -> caf::expected<parameter_set> {
          return std::move(xs[0]);
        });
      return rp;
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
          auto rk = tower_request(req, total, n, static_cast<int64_t>(k),
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
      auto plan = plan_split(self, b, what);
      if (!plan)
        return plan.error();
      auto n = static_cast<int64_t>(self->state.towers.size());
      auto shared_plan = std::make_shared<split_plan>();
      shared_plan->total = plan->total;
      std::vector<stats_request> reqs;
      for (size_t i = 0; i < plan->towers.size(); ++i) {
        bool skip = false;
        auto rk = tower_request(req, plan->total, n,
                                static_cast<int64_t>(plan->towers[i]), skip);
        if (skip)
          continue;
        shared_plan->towers.push_back(plan->towers[i]);
        shared_plan->begin.push_back(plan->begin[i]);
        shared_plan->end.push_back(plan->end[i]);
        reqs.push_back(rk);
      }
      auto rp = self->make_response_promise<stats_update>();
      std::vector<size_t> index_of(self->state.towers.size());
      for (size_t i = 0; i < shared_plan->towers.size(); ++i)
        index_of[shared_plan->towers[i]] = i;
      fan_out<stats_update>(
        self, shared_plan->towers, what, rp,
        [=, &b](size_t k) {
          auto i = index_of[k];
          return self->request(self->state.towers[k], self->state.timeout,
                               stats_atom::value, values,
                               tower::batch_range(b, shared_plan->begin[i],
                                                  shared_plan->end[i]),
                               reqs[i]);
        },
        [=](std::vector<stats_update>& us) -> caf::expected<stats_update> {
          if (us.size() == 1)
            return std::move(us[0]);
          std::vector<std::vector<layer_stats>*> stats;
          std::vector<int64_t> examples;
          stats_update out;
          out.worker = us[0].worker;
          out.step = us[0].step;
          for (auto& u : us) {
            stats.push_back(&u.layers);
            examples.push_back(u.examples);
            out.examples += u.examples;
          }
          auto combined = combine_stats(self, what, shared_plan->towers,
                                        std::move(stats), examples);
          if (!combined)
            return combined.error();
          out.layers = std::move(*combined);
          return out;
        });
      return rp;
    },
    [=](invert_atom, const factor_set& factors,
        const kfac_config& kcfg) -> caf::result<inverse_set> {
      auto& st = self->state;
      auto k = st.next_invert;
      st.next_invert = (k + 1) % st.towers.size();
      auto rp = self->make_response_promise<inverse_set>();
      fan_out<inverse_set>(
        self, {k}, "invert", rp,
        [=](size_t t) {
          return self->request(self->state.towers[t], self->state.timeout,
                               invert_atom::value, factors, kcfg);
        },
        [](std::vector<inverse_set>& xs) -> caf::expected<inverse_set> {
          return std::move(xs[0]);
        });
      return rp;
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
      auto plan = plan_split(self, b, what);
      if (!plan)
        return plan.error();
      auto shared_plan = std::make_shared<split_plan>(std::move(*plan));
      std::vector<size_t> index_of(self->state.towers.size());
      for (size_t i = 0; i < shared_plan->towers.size(); ++i)
        index_of[shared_plan->towers[i]] = i;
      auto rp = self->make_response_promise<eval_result>();
      fan_out<eval_result>(
        self, shared_plan->towers, what, rp,
        [=, &b](size_t k) {
          auto i = index_of[k];
          return self->request(self->state.towers[k], self->state.timeout,
                               eval_atom::value,
                               tower::batch_range(b, shared_plan->begin[i],
                                                  shared_plan->end[i]));
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
      auto rp = self->make_response_promise<tensor>();
      fan_out<tensor>(
        self, {0}, "gemm", rp,
        [=](size_t k) {
          return self->request(self->state.towers[k], self->state.timeout,
                               gemm_atom::value, a, trans_a, b, trans_b);
        },
        [](std::vector<tensor>& xs) -> caf::expected<tensor> {
          return std::move(xs[0]);
        });
      return rp;
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

namespace tower {

std::pair<int64_t, int64_t> part_range(int64_t total, int64_t parts,
                                       int64_t k) {
  auto base = total / parts;
  auto extra = total % parts;
  auto begin = k * base + std::min(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

batch batch_range(const batch& b, int64_t begin, int64_t end) {
  auto total = static_cast<int64_t>(b.labels.size());
  if (begin == 0 && end == total)
    return b;
  batch out;
  auto shape = b.images.shape();
  auto per_example = total > 0 ? b.images.size() / total : 0;
  shape[0] = end - begin;
  out.images = tensor(shape);
  std::copy(b.images.data() + begin * per_example,
            b.images.data() + end * per_example, out.images.data());
  out.labels.assign(b.labels.begin() + begin, b.labels.begin() + end);
  // A seed of its own per range: every tower's dropout masks differ.
  out.noise_seed = b.noise_seed
                   ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(begin + 1));
  return out;
}

} // namespace tower

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
