#include "runtime/json.hpp"

#include <cmath>
#include <cstdio>

namespace syncfac {

std::string json_error_text(const std::exception& err) {
  std::string what = err.what();
  if (!what.empty() && what.front() == '[') {
    auto end = what.find("] ");
    if (end != std::string::npos)
      what = what.substr(end + 2);
  }
  return what;
}

std::string json_quote(const std::string& str) {
  std::string out = "\"";
  for (unsigned char c : str) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

void json_object::key(const std::string& k) {
  if (!body_.empty())
    body_ += ", ";
  body_ += json_quote(k) + ": ";
}

json_object& json_object::add(const std::string& k, double value) {
  key(k);
  numbers_.emplace_back(k, value);
  if (!std::isfinite(value)) {
    body_ += "null";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.10g", value);
    body_ += buf;
  }
  return *this;
}

json_object& json_object::add(const std::string& k, int64_t value) {
  key(k);
  numbers_.emplace_back(k, static_cast<double>(value));
  body_ += std::to_string(value);
  return *this;
}

json_object& json_object::add(const std::string& k, const std::string& value) {
  key(k);
  body_ += json_quote(value);
  return *this;
}

json_object& json_object::add(const std::string& k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

json_object& json_object::add(const std::string& k,
                              const std::vector<std::string>& values) {
  key(k);
  body_ += "[";
  for (size_t i = 0; i < values.size(); ++i)
    body_ += (i == 0 ? "" : ", ") + json_quote(values[i]);
  body_ += "]";
  return *this;
}

json_object& json_object::add(const std::string& k, const json_object& value) {
  key(k);
  body_ += value.str();
  return *this;
}

json_object& json_object::merge(const json_object& other) {
  if (!other.body_.empty()) {
    if (!body_.empty())
      body_ += ", ";
    body_ += other.body_;
  }
  numbers_.insert(numbers_.end(), other.numbers_.begin(), other.numbers_.end());
  return *this;
}

} // namespace syncfac
