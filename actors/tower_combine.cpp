#include "actors/tower_combine.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "runtime/base/error.hpp"

namespace syncfac::tower {

namespace {

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

/// Σ_k w_k · sparse_k, rows of equal index summed, indices ascending.
caf::expected<std::vector<sparse_update>>
merge_sparse(size_t towers, const std::string& what,
             const std::vector<size_t>& which,
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
        return bad_answer(which[i], towers, what,
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
        return bad_answer(which[i], towers, what,
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

} // namespace

std::string who(size_t k, size_t towers) {
  return "tower device: tower " + std::to_string(k) + " of "
         + std::to_string(towers);
}

caf::error bad_answer(size_t k, size_t towers, const std::string& what,
                      const std::string& why) {
  return make_error(ec::bad_message,
                    who(k, towers) + " (" + what + "): " + why);
}

/// Σ_k w_k x_k over the towers' statistics, Σ w_k = 1; every tower must
/// report the same layers with the same shapes, in the same order.
caf::expected<std::vector<layer_stats>>
combine_stats(size_t towers, const std::string& what,
              const std::vector<size_t>& which,
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
      return bad_answer(which[i], towers, what,
                        "statistics of " + std::to_string(s.size())
                          + " layers, tower " + std::to_string(which[0])
                          + " sent " + std::to_string(out.size()));
    auto w = static_cast<float>(static_cast<double>(examples[i])
                                / static_cast<double>(total));
    for (size_t j = 0; j < out.size(); ++j) {
      if (s[j].layer != out[j].layer || s[j].a.shape() != out[j].a.shape()
          || s[j].g.shape() != out[j].g.shape())
        return bad_answer(which[i], towers, what,
                          "statistics of layer '" + s[j].layer + "' A "
                            + s[j].a.shape_string() + " G "
                            + s[j].g.shape_string() + " where tower "
                            + std::to_string(which[0]) + " sent '"
                            + out[j].layer + "' A " + out[j].a.shape_string()
                            + " G " + out[j].g.shape_string());
      add_scaled(out[j].a, s[j].a, w);
      add_scaled(out[j].g, s[j].g, w);
    }
  }
  return out;
}

caf::expected<stats_update>
combine_stats_updates(size_t towers, const std::string& what,
                      const std::vector<size_t>& which,
                      std::vector<stats_update>& us) {
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
  auto combined = combine_stats(towers, what, which, std::move(stats),
                                examples);
  if (!combined)
    return combined.error();
  out.layers = std::move(*combined);
  return out;
}

/// The batch's step_result from the towers' (see the header).
caf::expected<step_result> combine_steps(size_t towers,
                                         const std::string& what,
                                         const split_plan& plan,
                                         std::vector<step_result>& rs) {
  for (size_t i = 0; i < rs.size(); ++i)
    if (rs[i].count != plan.examples(i))
      return bad_answer(plan.towers[i], towers, what,
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
      return bad_answer(plan.towers[i], towers, what,
                        std::to_string(gs.size()) + " gradients, tower "
                          + std::to_string(plan.towers[0]) + " sent "
                          + std::to_string(out.gradients.size()));
    for (size_t j = 0; j < gs.size(); ++j) {
      auto& x = out.gradients[j];
      if (gs[j].name != x.name || gs[j].value.shape() != x.value.shape())
        return bad_answer(plan.towers[i], towers, what,
                          "gradient '" + gs[j].name + "' "
                            + gs[j].value.shape_string() + " where tower "
                            + std::to_string(plan.towers[0]) + " sent '"
                            + x.name + "' " + x.value.shape_string());
      add_scaled(x.value, gs[j].value, w[i]);
    }
  }
  auto sparse = merge_sparse(towers, what, plan.towers, rs, w);
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
  auto combined = combine_stats(towers, what, with_stats, std::move(stats),
                                examples);
  if (!combined)
    return combined.error();
  out.stats = std::move(*combined);
  return out;
}

} // namespace syncfac::tower
