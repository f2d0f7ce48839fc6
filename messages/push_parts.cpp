#include "messages/push_parts.hpp"

#include <algorithm>

#include "runtime/base/error.hpp"

namespace syncfac {

namespace {

int64_t bytes_of(const tensor& t) {
  return t.size() * static_cast<int64_t>(sizeof(float));
}

gradient_push empty_like(const gradient_push& push) {
  gradient_push p;
  p.worker = push.worker;
  p.local_step = push.local_step;
  return p;
}

bool sliced(const gradient_push& p, const std::string& variable) {
  return std::any_of(p.slices.begin(), p.slices.end(),
                     [&](const dense_slice& s) {
                       return s.variable == variable;
                     });
}

std::string part_name(const gradient_push& p) {
  return "push of worker " + std::to_string(p.worker) + " at step "
         + std::to_string(p.local_step) + ", part "
         + std::to_string(p.part) + " of " + std::to_string(p.parts);
}

} // namespace

std::vector<gradient_push> split_push(gradient_push push,
                                      int64_t max_part_bytes) {
  int64_t total = 0;
  for (const auto& g : push.dense)
    total += bytes_of(g.value);
  if (max_part_bytes <= 0 || 2 * total <= max_part_bytes
      || !push.slices.empty())
    return {std::move(push)};
  if (total <= max_part_bytes) // two halves, whole floats each
    max_part_bytes = (total / 4 + 1) / 2 * 4;
  auto max_floats = std::max<int64_t>(1, max_part_bytes / 4);
  std::vector<gradient_push> parts;
  parts.push_back(empty_like(push));
  parts.front().sparse = std::move(push.sparse);
  int64_t filled = 0; // bytes in parts.back()
  for (auto& g : push.dense) {
    auto n = g.value.size();
    if (bytes_of(g.value) <= max_part_bytes) {
      if (filled + bytes_of(g.value) > max_part_bytes) {
        parts.push_back(empty_like(push));
        filled = 0;
      }
      filled += bytes_of(g.value);
      parts.back().dense.push_back(std::move(g));
      continue;
    }
    // The slices view the gradient: nothing is copied until the wire.
    auto whole = std::make_shared<const tensor>(std::move(g.value));
    for (int64_t first = 0; first < n; first += max_floats) {
      auto count = std::min(max_floats, n - first);
      if (filled > 0) {
        parts.push_back(empty_like(push));
        filled = 0;
      }
      dense_slice s;
      s.variable = g.name;
      s.offset = first;
      s.source = whole;
      s.count = count;
      parts.back().slices.push_back(std::move(s));
      filled = count * 4;
    }
  }
  auto count = static_cast<int32_t>(parts.size());
  for (int32_t i = 0; i < count; ++i) {
    parts[static_cast<size_t>(i)].part = i;
    parts[static_cast<size_t>(i)].parts = count;
  }
  return parts;
}

std::map<std::string, std::vector<gradient_piece>>
pieces_by_variable(const gradient_push& push) {
  std::map<std::string, std::vector<gradient_piece>> result;
  for (const auto& s : push.slices)
    result[s.variable].push_back({s.offset, s.data(), s.size()});
  return result;
}

push_assembler::push_assembler(shape_lookup shape_of)
  : shape_of_(std::move(shape_of)) {
}

caf::expected<std::optional<gradient_push>>
push_assembler::add(gradient_push part) {
  auto bad = [&](const std::string& what) {
    assemblies_.erase(part.worker);
    return make_error(ec::bad_message, part_name(part) + ": " + what);
  };
  if (part.parts < 1 || part.part < 0 || part.part >= part.parts)
    return bad("part index out of range");
  if (part.parts == 1) {
    if (!part.slices.empty())
      return bad("a push of one part carries slices");
    return std::optional<gradient_push>{std::move(part)};
  }
  auto i = assemblies_.find(part.worker);
  if (i != assemblies_.end() && i->second.local_step != part.local_step) {
    if (part.local_step < i->second.local_step)
      return bad("older than the push in assembly (step "
                 + std::to_string(i->second.local_step) + ")");
    assemblies_.erase(i);
    ++abandoned_;
    i = assemblies_.end();
  }
  if (i == assemblies_.end()) {
    assembly a;
    a.local_step = part.local_step;
    a.parts = part.parts;
    a.seen.assign(static_cast<size_t>(part.parts), false);
    a.whole = empty_like(part);
    i = assemblies_.emplace(part.worker, std::move(a)).first;
  }
  auto& a = i->second;
  if (part.parts != a.parts)
    return bad("the push's earlier parts said " + std::to_string(a.parts)
               + " parts");
  if (a.seen[static_cast<size_t>(part.part)])
    return bad("part sent twice");
  if (auto err = take(a, part))
    return bad(render(err));
  a.seen[static_cast<size_t>(part.part)] = true;
  if (++a.received < a.parts)
    return std::optional<gradient_push>{};
  if (auto err = check_complete(a))
    return bad(render(err));
  auto whole = std::move(a.whole);
  assemblies_.erase(i);
  return std::optional<gradient_push>{std::move(whole)};
}

caf::error push_assembler::take(assembly& a, gradient_push& part) {
  for (auto& g : part.dense) {
    if (sliced(a.whole, g.name))
      return make_error(ec::bad_message,
                        "'" + g.name + "' comes whole and sliced");
    a.whole.dense.push_back(std::move(g));
  }
  for (auto& s : part.sparse)
    a.whole.sparse.push_back(std::move(s));
  for (auto& s : part.slices)
    if (auto err = take_slice(a, s))
      return err;
  return caf::none;
}

caf::error push_assembler::take_slice(assembly& a, dense_slice& s) {
  auto shape = shape_of_(s.variable);
  if (shape == nullptr)
    return make_error(ec::unknown_name, "a slice of '" + s.variable
                                          + "', which the shard does not hold");
  auto total = element_count(*shape);
  auto n = s.size();
  bool flat = s.source || s.values.rank() == 1;
  if (!flat || s.offset < 0 || n < 1 || s.offset > total - n)
    return make_error(ec::bad_message,
                      "slice [" + std::to_string(s.offset) + ", "
                        + std::to_string(s.offset + n) + ") of '" + s.variable
                        + "' is not a 1-D range within its "
                        + std::to_string(total) + " elements");
  for (const auto& g : a.whole.dense)
    if (g.name == s.variable)
      return make_error(ec::bad_message,
                        "'" + s.variable + "' comes whole and sliced");
  for (const auto& t : a.whole.slices)
    if (t.variable == s.variable && s.offset < t.offset + t.size()
        && t.offset < s.offset + n)
      return make_error(ec::bad_message,
                        "slice [" + std::to_string(s.offset) + ", "
                          + std::to_string(s.offset + n) + ") of '"
                          + s.variable + "' overlaps an earlier one");
  a.whole.slices.push_back(std::move(s));
  return caf::none;
}

caf::error push_assembler::check_complete(const assembly& a) const {
  // The slices do not overlap (take_slice): their sizes add up to what
  // they cover.
  for (const auto& [name, pieces] : pieces_by_variable(a.whole)) {
    int64_t covered = 0;
    for (const auto& p : pieces)
      covered += p.count;
    auto shape = shape_of_(name);
    if (shape == nullptr)
      return make_error(ec::unknown_name, "'" + name + "' is no longer held "
                                          "by the shard");
    auto total = element_count(*shape);
    if (covered != total)
      return make_error(ec::bad_message,
                        "the slices of '" + name + "' cover "
                          + std::to_string(covered) + " of its "
                          + std::to_string(total) + " elements");
  }
  return caf::none;
}

} // namespace syncfac
