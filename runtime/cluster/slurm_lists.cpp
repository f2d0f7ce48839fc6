#include "runtime/cluster/slurm_lists.hpp"

#include <cctype>
#include <utility>

#include "runtime/base/error.hpp"
#include "runtime/comma_list.hpp"

namespace syncfac {

namespace {

/// Host lists of a few thousand nodes are normal; far more is a typo
/// ("n[1-99999999]") that would eat the memory.
constexpr size_t max_hosts = 1 << 20;

caf::error bad_list(const std::string& variable, const std::string& value,
                    const std::string& what) {
  return make_error(ec::invalid_config,
                    variable + "=" + in_quotes(value) + ": " + what);
}

bool all_digits(const std::string& s) {
  if (s.empty())
    return false;
  for (unsigned char c : s)
    if (!std::isdigit(c))
      return false;
  return true;
}

/// Splits at commas outside brackets.
std::vector<std::string> split_top_level(const std::string& text) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '[')
      ++depth;
    else if (c == ']')
      --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

/// "001" with value 7 and width 3 -> "007".
std::string padded(uint64_t value, size_t width) {
  auto s = std::to_string(value);
  if (s.size() < width)
    s.insert(0, width - s.size(), '0');
  return s;
}

/// The strings one bracket group stands for ("01-03,07" -> 01 02 03 07).
caf::expected<std::vector<std::string>>
expand_group(const std::string& variable, const std::string& value,
             const std::string& group) {
  std::vector<std::string> result;
  for (const auto& item : comma_items(group)) {
    auto dash = item.find('-');
    auto lo = item.substr(0, dash);
    auto hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 18
        || hi.size() > 18)
      return bad_list(variable, value,
                      "bad range " + in_quotes(item) + " in [" + group
                        + "] (expected numbers like [01-04,07])");
    auto a = std::stoull(lo);
    auto b = std::stoull(hi);
    if (b < a)
      return bad_list(variable, value,
                      "reversed range " + in_quotes(item) + " in [" + group
                        + "]");
    if (b - a >= max_hosts || result.size() + (b - a) >= max_hosts)
      return bad_list(variable, value,
                      "range " + in_quotes(item) + " is too long");
    for (auto i = a; i <= b; ++i)
      result.push_back(padded(i, lo.size()));
  }
  return result;
}

} // namespace

caf::expected<std::vector<std::string>>
expand_slurm_hostlist(const std::string& variable, const std::string& value) {
  if (value.empty())
    return bad_list(variable, value, "empty host list");
  int depth = 0;
  for (char c : value) {
    if (c == '[' && ++depth > 1)
      return bad_list(variable, value, "nested '['");
    if (c == ']' && --depth < 0)
      return bad_list(variable, value, "unbalanced ']'");
  }
  if (depth != 0)
    return bad_list(variable, value, "unbalanced '[' (no closing ']')");
  std::vector<std::string> hosts;
  for (const auto& name : split_top_level(value)) {
    if (name.empty())
      return bad_list(variable, value, "empty host name");
    // The names so far, each extended by every literal and group in turn.
    std::vector<std::string> names{""};
    size_t i = 0;
    while (i < name.size()) {
      if (name[i] != '[') {
        auto next = name.find('[', i);
        auto literal = name.substr(i, next == std::string::npos
                                        ? std::string::npos
                                        : next - i);
        for (unsigned char c : literal)
          if (std::isspace(c) || std::iscntrl(c))
            return bad_list(variable, value,
                            "space or control character in "
                              + in_quotes(name));
        for (auto& n : names)
          n += literal;
        i = next == std::string::npos ? name.size() : next;
        continue;
      }
      auto close = name.find(']', i);
      auto group = name.substr(i + 1, close - i - 1);
      if (group.empty())
        return bad_list(variable, value, "empty brackets in "
                                           + in_quotes(name));
      auto items = expand_group(variable, value, group);
      if (!items)
        return items.error();
      if (names.size() * items->size() > max_hosts)
        return bad_list(variable, value, "too many hosts");
      std::vector<std::string> next;
      next.reserve(names.size() * items->size());
      for (const auto& n : names)
        for (const auto& item : *items)
          next.push_back(n + item);
      names = std::move(next);
      i = close + 1;
    }
    for (auto& n : names)
      hosts.push_back(std::move(n));
    if (hosts.size() > max_hosts)
      return bad_list(variable, value, "too many hosts");
  }
  return hosts;
}

caf::expected<std::vector<int32_t>>
expand_slurm_tasks_per_node(const std::string& variable,
                            const std::string& value) {
  if (value.empty())
    return bad_list(variable, value, "empty list of task counts");
  std::vector<int32_t> counts;
  for (const auto& item : split_top_level(value)) {
    // "N" or "N(xM)".
    auto paren = item.find('(');
    auto count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0
          || item.back() != ')')
        return bad_list(variable, value,
                        "bad entry " + in_quotes(item)
                          + " (expected N or N(xM), e.g. 2(x3))");
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(repeat) || count.size() > 6
        || repeat.size() > 6)
      return bad_list(variable, value,
                      "bad entry " + in_quotes(item)
                        + " (expected N or N(xM), e.g. 2(x3))");
    auto n = std::stol(count);
    auto m = std::stol(repeat);
    if (n < 1 || m < 1)
      return bad_list(variable, value,
                      "entry " + in_quotes(item) + ": counts must be >= 1");
    if (counts.size() + static_cast<size_t>(m) > max_hosts)
      return bad_list(variable, value, "too many nodes");
    counts.insert(counts.end(), static_cast<size_t>(m),
                  static_cast<int32_t>(n));
  }
  return counts;
}

} // namespace syncfac
