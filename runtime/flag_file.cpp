#include "runtime/flag_file.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include "runtime/base/error.hpp"

namespace syncfac {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_name(const std::string& name,
                         const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = 0;
  for (const auto& c : candidates) {
    auto d = edit_distance(name, c);
    if (best.empty() || d < best_d) {
      best = c;
      best_d = d;
    }
  }
  auto limit = std::max<size_t>(2, std::max(name.size(), best.size()) / 3);
  return best_d <= limit ? best : std::string{};
}

namespace {

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return {};
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// `s` without a comment starting with # or ; outside quotes.
std::string strip_comment(const std::string& s) {
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '"')
      quoted = !quoted;
    else if (!quoted && (s[i] == '#' || s[i] == ';'))
      return s.substr(0, i);
  }
  return s;
}

/// The words of a line of flags, split at blanks outside double quotes
/// (the quotes dropped); nullopt when a quote is not closed.
std::optional<std::vector<std::string>> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false;
  bool in_word = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
      in_word = true;
    } else if (!quoted && (c == ' ' || c == '\t')) {
      if (in_word)
        words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quoted)
    return std::nullopt;
  if (in_word)
    words.push_back(word);
  return words;
}

/// Whether `line` is a line of flags ("--a 1 --b", "--a=1"), not the
/// setting "--a = 1".
bool is_flag_line(const std::string& line) {
  if (line.compare(0, 2, "--") != 0)
    return false;
  auto end = line.find_first_of(" \t");
  if (end == std::string::npos || line.substr(0, end).find('=')
                                    != std::string::npos)
    return true;
  return line[line.find_first_not_of(" \t", end)] != '=';
}

/// The settings of a line of flags (`where`: path:line for errors).
caf::error parse_flag_line(const std::string& line, size_t lineno,
                           const std::string& where,
                           std::vector<flag_setting>& out) {
  auto words = words_of(line);
  if (!words)
    return make_error(ec::invalid_config,
                      where + ": a quote is not closed in '" + line + "'");
  for (size_t i = 0; i < words->size(); ++i) {
    const auto& w = (*words)[i];
    if (w.size() < 3 || w.compare(0, 2, "--") != 0)
      return make_error(ec::invalid_config,
                        where + ": expected a flag (--name), got '" + w
                          + "'");
    auto eq = w.find('=');
    if (eq != std::string::npos) {
      out.push_back({w.substr(2, eq - 2), w.substr(eq + 1), lineno, false});
      continue;
    }
    if (i + 1 < words->size() && (*words)[i + 1].compare(0, 2, "--") != 0) {
      out.push_back({w.substr(2), (*words)[i + 1], lineno, false});
      ++i;
      continue;
    }
    out.push_back({w.substr(2), "true", lineno, true});
  }
  return caf::none;
}

} // namespace

caf::expected<std::vector<flag_setting>>
parse_flag_file(const std::string& text, const std::string& path) {
  std::vector<flag_setting> out;
  std::istringstream in{text};
  std::string category;
  size_t lineno = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++lineno;
    auto line = trim(strip_comment(raw));
    if (line.empty())
      continue;
    auto where = path + ":" + std::to_string(lineno);
    if (is_flag_line(line)) {
      if (!category.empty())
        return make_error(ec::invalid_config,
                          where + ": a line of flags inside section ["
                            + category + "]: write it before any section");
      if (auto err = parse_flag_line(line, lineno, where, out))
        return err;
      continue;
    }
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3)
        return make_error(ec::invalid_config,
                          where + ": malformed section '" + line + "'");
      category = trim(line.substr(1, line.size() - 2));
      if (category == "global")
        category.clear();
      continue;
    }
    auto eq = line.find('=');
    if (eq == std::string::npos || trim(line.substr(0, eq)).empty())
      return make_error(ec::invalid_config,
                        where + ": expected 'flag = value', got '" + line
                          + "'");
    auto name = trim(line.substr(0, eq));
    if (name.compare(0, 2, "--") == 0)
      name = name.substr(2);
    auto value = trim(line.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    out.push_back(
      {category.empty() ? name : category + "." + name, value, lineno});
  }
  return out;
}

} // namespace syncfac
