#include "runtime/observe/prometheus_text.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace syncfac::observe {

namespace {

// The backslash and the newline escaped, and the double quote too where
// `quote` (a label value; HELP text keeps its quotes).
std::string escaped(const std::string& text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"' && quote)
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string sanitize_label_name(const std::string& name) {
  // Label names may not hold ':'.
  auto out = sanitize_metric_name(name);
  for (auto& c : out)
    if (c == ':')
      c = '_';
  return out;
}

} // namespace

std::string sanitize_metric_name(const std::string& name) {
  std::string out = name.empty() ? std::string{"_"} : name;
  for (size_t i = 0; i < out.size(); ++i) {
    auto c = static_cast<unsigned char>(out[i]);
    bool ok = std::isalpha(c) || c == '_' || c == ':'
              || (i > 0 && std::isdigit(c));
    if (!ok)
      out[i] = '_';
  }
  return out;
}

std::string escape_label_value(const std::string& value) {
  return escaped(value, true);
}

std::string format_sample_value(double value) {
  if (std::isnan(value))
    return "NaN";
  if (std::isinf(value))
    return value > 0 ? "+Inf" : "-Inf";
  // The shortest %g that reads back exactly keeps counters readable
  // ("120", not "120.00000000000000").
  char buf[40];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value)
      break;
  }
  return buf;
}

std::string exposition_text(const std::vector<metric_family>& families) {
  // A family may appear once only: samples of families with the same name
  // are written under the first one's help and type.
  std::vector<metric_family> merged;
  std::map<std::string, size_t> index;
  for (const auto& fam : families) {
    auto name = sanitize_metric_name(fam.name);
    auto i = index.find(name);
    if (i == index.end()) {
      index.emplace(name, merged.size());
      merged.push_back(fam);
      merged.back().name = name;
    } else {
      auto& into = merged[i->second].samples;
      into.insert(into.end(), fam.samples.begin(), fam.samples.end());
    }
  }
  std::string out;
  for (const auto& fam : merged) {
    if (fam.samples.empty())
      continue;
    const auto& name = fam.name;
    out += "# HELP " + name + " " + escaped(fam.help, false) + "\n";
    out += "# TYPE " + name + " "
           + (fam.type == metric_type::counter ? "counter" : "gauge") + "\n";
    for (const auto& s : fam.samples) {
      out += name;
      if (!s.labels.empty()) {
        out += "{";
        for (size_t i = 0; i < s.labels.size(); ++i) {
          if (i > 0)
            out += ",";
          out += sanitize_label_name(s.labels[i].first) + "=\""
                 + escape_label_value(s.labels[i].second) + "\"";
        }
        out += "}";
      }
      out += " " + format_sample_value(s.value) + "\n";
    }
  }
  return out;
}

} // namespace syncfac::observe
