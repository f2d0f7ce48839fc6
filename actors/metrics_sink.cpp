#include "actors/metrics_sink.hpp"

#include <sstream>

#include "actors/spawn_validated.hpp"
#include "runtime/base/error.hpp"
#include "runtime/json.hpp"

namespace syncfac {

caf::error metrics_sink_config::validate() const {
  if (log == nullptr)
    return make_error(ec::invalid_config, "metrics sink: no log to write to");
  return caf::none;
}

std::string to_log_line(const metrics_record& rec) {
  std::ostringstream out;
  out.precision(6);
  out << "[" << rec.source << "] global_step: " << rec.step;
  for (const auto& kvp : rec.fields)
    out << " | " << kvp.first << ": " << kvp.second;
  return out.str();
}

namespace {

metrics_actor::behavior_type
metrics_sink(metrics_actor::stateful_pointer<metrics_sink_state> self,
             metrics_sink_config cfg) {
  self->state.cfg = cfg;
  return {
    [=](metrics_atom, metrics_record& rec) {
      auto& st = self->state;
      if (rec.source.empty()) {
        ++st.refused;
        st.cfg.log->line("metrics: refused a record without a source (step "
                         + std::to_string(rec.step) + ")");
        return;
      }
      json_object fields;
      fields.add("source", rec.source).add("step", rec.step);
      for (const auto& kvp : rec.fields)
        fields.add(kvp.first, kvp.second);
      st.cfg.log->record(to_log_line(rec), fields, rec.source);
      ++st.reports[rec.source];
      st.last[rec.source] = std::move(rec);
    },
    [=](status_atom) {
      auto& st = self->state;
      std::vector<metrics_record> out;
      for (const auto& kvp : st.last) {
        auto rec = kvp.second;
        rec.fields["reports"] = static_cast<double>(st.reports[kvp.first]);
        out.push_back(std::move(rec));
      }
      return out;
    },
  };
}

} // namespace

caf::expected<metrics_actor> spawn_metrics_sink(caf::actor_system& sys,
                                                metrics_sink_config cfg) {
  return spawn_validated(sys, metrics_sink, std::move(cfg));
}

} // namespace syncfac
