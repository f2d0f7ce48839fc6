#pragma once

// A minimal JSON object writer for metrics lines and summaries: flat or
// nested objects of numbers, strings, booleans and arrays of strings, written in insertion
// order. Non-finite numbers become null (JSON has no NaN).

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

namespace syncfac {

/// The message of a JSON parser's exception (nlohmann::json's) without its
/// "[json.exception.parse_error.101] " tag: what a user's file got wrong.
std::string json_error_text(const std::exception& err);

class json_object {
public:
  json_object& add(const std::string& key, double value);
  json_object& add(const std::string& key, int64_t value);
  json_object& add(const std::string& key, int value) {
    return add(key, static_cast<int64_t>(value));
  }
  json_object& add(const std::string& key, const std::string& value);
  json_object& add(const std::string& key, const char* value) {
    return add(key, std::string{value});
  }
  json_object& add(const std::string& key, bool value);
  json_object& add(const std::string& key,
                   const std::vector<std::string>& values);
  json_object& add(const std::string& key, const json_object& value);

  /// Appends every field of `other`.
  json_object& merge(const json_object& other);

  /// The top-level number fields in insertion order, for writers of
  /// other formats (TensorBoard scalars: runtime/training_log).
  const std::vector<std::pair<std::string, double>>& numbers() const noexcept {
    return numbers_;
  }

  bool empty() const noexcept {
    return body_.empty();
  }

  /// The object as one line of JSON.
  std::string str() const {
    return "{" + body_ + "}";
  }

private:
  void key(const std::string& k);

  std::string body_;
  std::vector<std::pair<std::string, double>> numbers_;
};

/// `str` as a quoted JSON string.
std::string json_quote(const std::string& str);

} // namespace syncfac
