#include "runtime/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"

namespace syncfac {

const char* to_string(lr_schedule_kind x) noexcept {
  switch (x) {
    case lr_schedule_kind::constant: return "constant";
    case lr_schedule_kind::step: return "step";
    case lr_schedule_kind::cosine: return "cosine";
    case lr_schedule_kind::polynomial: return "polynomial";
  }
  return "?";
}

caf::expected<lr_schedule_kind> parse_lr_schedule_kind(const std::string& s) {
  for (auto k : {lr_schedule_kind::constant, lr_schedule_kind::step,
                 lr_schedule_kind::cosine, lr_schedule_kind::polynomial})
    if (s == to_string(k))
      return k;
  return make_error(ec::invalid_config,
                    "--lr_schedule '" + s
                      + "' is not a schedule (constant, step, cosine or "
                        "polynomial)");
}

caf::error lr_schedule::validate() const {
  auto bad = [this](const std::string& what) {
    return make_error(ec::invalid_config,
                      what + " (schedule " + to_string(kind) + ")");
  };
  if (warmup_steps < 0)
    return bad("--warmup_steps " + std::to_string(warmup_steps)
               + " must be >= 0");
  switch (kind) {
    case lr_schedule_kind::constant:
      break;
    case lr_schedule_kind::step:
      if (boundaries.empty())
        return bad("--lr_boundaries is empty: a step schedule needs the "
                   "global steps where the rate drops");
      for (size_t i = 0; i < boundaries.size(); ++i)
        if (boundaries[i] <= 0 || (i > 0 && boundaries[i] <= boundaries[i - 1]))
          return bad("--lr_boundaries must be positive and increasing; "
                     "item "
                     + std::to_string(i + 1) + " is "
                     + std::to_string(boundaries[i]));
      if (!(decay_rate > 0 && decay_rate <= 1))
        return bad("--lr_decay_rate " + std::to_string(decay_rate)
                   + " must be in (0, 1]");
      break;
    case lr_schedule_kind::cosine:
    case lr_schedule_kind::polynomial:
      if (decay_steps <= warmup_steps)
        return bad("--lr_decay_steps " + std::to_string(decay_steps)
                   + " must be greater than --warmup_steps "
                   + std::to_string(warmup_steps));
      if (!(end_factor >= 0 && end_factor <= 1))
        return bad("--lr_end_factor " + std::to_string(end_factor)
                   + " must be in [0, 1]");
      if (kind == lr_schedule_kind::polynomial
          && !(power > 0 && std::isfinite(power)))
        return bad("--lr_power " + std::to_string(power)
                   + " must be a positive number");
      break;
  }
  return caf::none;
}

double lr_schedule::factor_at(int64_t step) const {
  step = std::max<int64_t>(step, 0);
  double warm = warmup_steps > 0 && step < warmup_steps
                  ? static_cast<double>(step + 1)
                      / static_cast<double>(warmup_steps)
                  : 1.0;
  double decay = 1.0;
  switch (kind) {
    case lr_schedule_kind::constant:
      break;
    case lr_schedule_kind::step:
      for (auto b : boundaries)
        if (step >= b)
          decay *= decay_rate;
      break;
    case lr_schedule_kind::cosine:
    case lr_schedule_kind::polynomial: {
      auto span = static_cast<double>(decay_steps - warmup_steps);
      auto t = std::clamp(static_cast<double>(step - warmup_steps) / span,
                          0.0, 1.0);
      double shape = kind == lr_schedule_kind::cosine
                       ? 0.5 * (1.0 + std::cos(M_PI * t))
                       : std::pow(1.0 - t, static_cast<double>(power));
      decay = end_factor + (1.0 - end_factor) * shape;
      break;
    }
  }
  return warm * decay;
}

std::string describe(const lr_schedule& s) {
  std::ostringstream out;
  switch (s.kind) {
    case lr_schedule_kind::constant:
      break;
    case lr_schedule_kind::step: {
      out << "step x" << s.decay_rate << " at";
      for (auto b : s.boundaries)
        out << (b == s.boundaries.front() ? " " : ",") << b;
      break;
    }
    case lr_schedule_kind::cosine:
    case lr_schedule_kind::polynomial:
      out << to_string(s.kind);
      if (s.kind == lr_schedule_kind::polynomial)
        out << " (power " << s.power << ")";
      out << " to " << s.end_factor << "x at step " << s.decay_steps;
      break;
  }
  if (s.warmup_steps > 0)
    out << (out.tellp() > 0 ? " after " : "") << s.warmup_steps
        << " warm-up steps";
  return out.str();
}

caf::expected<std::vector<int64_t>>
parse_lr_boundaries(const std::string& text) {
  std::vector<int64_t> out;
  if (text.empty())
    return out;
  for (const auto& item : comma_items(text)) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v <= 0)
      return make_error(ec::invalid_config,
                        "--lr_boundaries '" + text + "': '" + item
                          + "' is not a positive global step");
    out.push_back(v);
  }
  return out;
}

} // namespace syncfac
