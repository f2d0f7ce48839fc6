#pragma once

// The items of a comma-separated value as flags and launcher variables
// write them (--layout chief=1,ps=2, --hosts h1:2,h2:2, Slurm's [01-03,07],
// --variables_to_average fc4,conv2), split in one place; and lists of
// names joined for messages.

#include <string>
#include <vector>

namespace syncfac {

/// "a,b,,c" as {"a", "b", "", "c"}; "" as {""}. Empty items stay, for the
/// caller's check to name.
inline std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> result;
  size_t begin = 0;
  for (;;) {
    auto comma = text.find(',', begin);
    result.push_back(text.substr(begin, comma == std::string::npos
                                          ? std::string::npos
                                          : comma - begin));
    if (comma == std::string::npos)
      return result;
    begin = comma + 1;
  }
}

/// {"a", "b"} as "a, b": a list of names in a message.
inline std::string comma_joined(const std::vector<std::string>& items) {
  std::string result;
  for (const auto& item : items)
    result += (result.empty() ? "" : ", ") + item;
  return result;
}

} // namespace syncfac
