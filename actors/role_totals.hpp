#pragma once

// The run's summary of its roles: every figure of their status tables
// (actors/role_figures.hpp) folded over the actors of each role as the
// table says (summed, the highest, the mean), written as the summary's
// "roles" object and K-FAC's figures of its "kfac" object. The summary's
// other figures that come from the roles (token_wait_share, the
// transfers) are computed from these totals.

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "actors/role_figures.hpp"
#include "runtime/json.hpp"

namespace syncfac {

/// The roles' figures, each folded over the actors of its role as it
/// came (statuses added in any order).
class role_totals {
public:
  /// Adds one actor's status, counted under `kind` (the role's kind
  /// unless given: "stats_worker" for K-FAC's statistics workers).
  template <class Status>
  void add(const Status& st, const std::string& kind = {}) {
    auto k = kind.empty() ? std::string{role_kind(st)} : kind;
    ++actors_[k];
    figures(st, [&](summary_part part, const observe::figure& fig,
                    auto value) {
      fold(k, part, fig, static_cast<double>(value),
           std::is_integral<decltype(value)>::value);
    });
  }

  /// A folded figure of the role `kind` (0 when none of its actors
  /// reported); `key` as its table names it. K-FAC's figures are one
  /// total over every role, of the kind "kfac".
  double value(const std::string& kind, const std::string& key) const;

  /// The actors of `kind` that reported.
  int64_t actors(const std::string& kind) const;

  /// {"ps": {...}, "worker": {...}, ...}: the figures the tables put with
  /// their role, by role kind (empty before any status).
  json_object roles_json() const;

  /// The figures the tables put with K-FAC's, over every role.
  json_object kfac_json() const;

private:
  struct total {
    std::string kind;
    summary_part part;
    observe::figure fig;
    bool integral = false;
    double value = 0;
    int64_t actors = 0;
  };

  void fold(const std::string& kind, summary_part part,
            const observe::figure& fig, double value, bool integral);

  const total* find(const std::string& kind, const std::string& key) const;

  static void add_to(json_object& obj, const total& t);

  /// In the order the tables declare them, kinds in the order they came.
  std::vector<total> totals_;
  std::map<std::string, int64_t> actors_;
};

} // namespace syncfac
