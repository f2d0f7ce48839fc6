#pragma once

// What the PS shard's files share, which no other file uses
// (actors/ps_shard.hpp says what the shard does). Each function works on
// the shard's state alone; which message calls which is
// actors/ps_shard.cpp's.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/make_message.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/ps_shard.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

namespace ps_shard_parts {

/// "ps shard <index>": how every answer and error names the shard.
inline std::string shard_name(int32_t index) {
  return "ps shard " + std::to_string(index);
}

/// `err` with "prefix: " in front of its context, same code and category:
/// an optimizer error reaching a chief should say which shard raised it.
inline caf::error prefixed(const std::string& prefix, const caf::error& err) {
  const auto& ctx = err.context();
  auto what = ctx.size() == 1 && ctx.match_element<std::string>(0)
                ? ctx.get_as<std::string>(0)
                : render(err);
  return caf::error{err.code(), err.category(),
                    caf::make_message(prefix + ": " + what)};
}

/// Answers `rp` with x's value, or with its error.
template <class T>
void deliver(caf::typed_response_promise<T>& rp, caf::expected<T> x) {
  if (x)
    rp.deliver(std::move(*x));
  else
    rp.deliver(std::move(x.error()));
}

// -- configuration (actors/ps_shard_config.cpp) -------------------------------

/// Builds the state from a config, validating it first.
caf::error init_state(ps_shard_state& st, ps_shard_config cfg);

// -- pushes (actors/ps_shard_push.cpp) ----------------------------------------

/// Checks a whole push, then adds it to the accumulators: whether it was
/// fresh. A malformed push is refused whole and counted (on the variable
/// its error names, if any); no accumulator sees any of it.
caf::expected<bool> take_push(ps_shard_state& st, const gradient_push& push);

// -- applying (actors/ps_shard_apply.cpp) -------------------------------------

/// Whether an apply of n can complete now: n fresh pushes came, or every
/// accumulator holds n gradients.
bool all_ready(const ps_shard_state& st, int64_t n);

/// One optimizer step from the averages (every accumulator ready(n)),
/// each average times `scale`; moves the shard to the next step.
caf::expected<applied> complete(ps_shard_state& st, int64_t n, float scale);

/// Puts the shard and every accumulator at `step` without an apply (the
/// chief's set_step, a restore): pushes older than it are stale from now
/// on, and the shard reports no last apply (actors/shard_steps.hpp), so
/// no restarted chief repeats one that did not bring it here.
void set_global_step(ps_shard_state& st, int64_t step);

/// The sum of the squares of the averages an apply of n takes now.
caf::expected<norm_part> norm_of_round(const ps_shard_state& st, int64_t n);

/// Fails the pending apply and norm, if any, saying why they will never
/// complete.
void abandon_pending(ps_shard_state& st, ec code, const std::string& why);

/// ec::invalid_argument unless the chief may ask for an apply (or, with
/// `what`, a norm) of n at `step` now.
caf::error check_apply(const ps_shard_state& st, int64_t step, int64_t n,
                       const char* what = "apply");

/// Checks a whole inverse set against the shard's layers, then installs
/// it: one bad layer refuses the set, so a shard never mixes halves.
caf::error install_inverses(ps_shard_state& st, const inverse_set& set);

// -- pulls (actors/ps_shard_pulls.cpp) ----------------------------------------

/// The shard's variables at its step; counted as sent.
shard_params current_values(ps_shard_state& st);

/// The shard's variables at its step for checked row requests: each
/// variable a request names as those rows, every other one whole; counted
/// as sent.
caf::expected<shard_params>
current_values(ps_shard_state& st, const std::vector<row_request>& requests);

/// ec::invalid_argument (ec::unknown_name for a variable the shard lacks)
/// unless every request names a sparse variable of the shard, once, and
/// rows of it.
caf::error check_row_requests(const ps_shard_state& st,
                              const std::vector<row_request>& requests);

/// The answer to a waiting row pull its worker cancelled: the rows at the
/// shard's step, and no other variable.
void answer_with_rows(ps_shard_state& st, waiting_pull& p);

/// An answer without values to a waiting pull that will not get them.
void answer_without_values(ps_shard_state& st, waiting_pull& p);

/// Answers the pulls that wait for the shard's step (or an earlier one).
void release_due_pulls(ps_shard_state& st);

// -- status (actors/ps_shard_status.cpp) --------------------------------------

/// What the shard reports of itself: steps, pushes, K-FAC, transfers and
/// every accumulator's figures.
shard_status make_status(const ps_shard_state& st);

} // namespace ps_shard_parts

} // namespace syncfac
