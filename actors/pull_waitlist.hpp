#pragma once

// The pulls a PS shard holds until it reaches the step they ask for: a
// worker sends its pull with its token request, and answering it at once
// would hand it the values of the step before the apply its token waits
// for, which it would throw away and pull again (docs/protocol.md, "The
// pull with the token"). Which pulls are due is decided here; the shard
// answers them.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/typed_response_promise.hpp>

#include "messages/row_pull.hpp"
#include "messages/sync_messages.hpp"

namespace syncfac {

struct waiting_pull {
  caf::typed_response_promise<shard_params> promise;
  /// Answered with values once the shard is at this step or later.
  int64_t step = 0;
  /// Whose it is: a cancel from this sender answers it without values.
  caf::actor_addr sender;
  /// After this it is answered without values.
  std::chrono::steady_clock::time_point deadline;
  /// A row pull's requests (checked on arrival); empty: every variable
  /// whole.
  std::vector<row_request> rows{};
};

class pull_waitlist {
public:
  using clock_type = std::chrono::steady_clock;

  void add(waiting_pull pull) { pulls_.push_back(std::move(pull)); }

  bool empty() const { return pulls_.empty(); }

  size_t size() const { return pulls_.size(); }

  /// The pulls due at `step` (asked for it or an earlier one), removed.
  std::vector<waiting_pull> take_due(int64_t step) {
    return take_if([step](const waiting_pull& p) { return p.step <= step; });
  }

  /// The pulls of `sender`, removed.
  std::vector<waiting_pull> take_from(const caf::actor_addr& sender) {
    return take_if(
      [&sender](const waiting_pull& p) { return p.sender == sender; });
  }

  /// The pulls whose deadline is `now` or earlier, removed.
  std::vector<waiting_pull> take_expired(clock_type::time_point now) {
    return take_if([now](const waiting_pull& p) { return p.deadline <= now; });
  }

  /// Every pull, removed (the shard moves to another step or stops).
  std::vector<waiting_pull> take_all() {
    std::vector<waiting_pull> out;
    out.swap(pulls_);
    return out;
  }

  /// The earliest deadline, if any pull waits.
  std::optional<clock_type::time_point> next_deadline() const {
    if (pulls_.empty())
      return std::nullopt;
    return std::min_element(pulls_.begin(), pulls_.end(),
                            [](const waiting_pull& a, const waiting_pull& b) {
                              return a.deadline < b.deadline;
                            })
      ->deadline;
  }

private:
  template <class Pred>
  std::vector<waiting_pull> take_if(Pred pred) {
    std::vector<waiting_pull> out;
    auto keep = std::stable_partition(pulls_.begin(), pulls_.end(),
                                      [&](const waiting_pull& p) {
                                        return !pred(p);
                                      });
    std::move(keep, pulls_.end(), std::back_inserter(out));
    pulls_.erase(keep, pulls_.end());
    return out;
  }

  std::vector<waiting_pull> pulls_;
};

} // namespace syncfac
