#pragma once

// Splitting a gradient push into parts for the network, and assembling it
// again on the shard. CAF 0.17 serialises a whole message before its first
// byte leaves and hands it over only after its last byte arrived, so one
// 16 MiB push overlaps nothing; as parts sent back to back the receiver
// loads one while the next is on the wire. The assembly copies nothing: a
// sliced variable stays in its slices, which the shard checks as one
// gradient and adds where they belong (conditional_accumulator's pieces).
// An assembly into a whole tensor cost what the overlap saved (1 MiB parts
// 45-48 % of raw TCP against 49-52 % whole, docs/benchmarks-history.md "Network").
//
// The shard treats the assembled push as if it had come whole: the same
// validation, the same sums bit for bit, the same staleness rule.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/sync_messages.hpp"
#include "runtime/sync/conditional_accumulator.hpp"

namespace syncfac {

/// Pushes to shards in other processes go in parts of 1 MiB (see above).
constexpr int64_t default_push_part_bytes = int64_t{1} << 20;

/// `push` as parts of at most about `max_part_bytes` of dense values each
/// (whole variables packed together, larger ones sliced; sparse updates go
/// with part 0). A push of more than half of `max_part_bytes` goes as two
/// parts at least, so that it overlaps too: a 1 MiB push as two parts
/// reached 56-68 % of raw TCP against 43-52 % as one message. Smaller
/// parts for every push would cost more in messages than they overlap (a
/// 13 MB ConvNet push in 512 KiB parts: 7 % fewer cluster steps/s than in
/// 1 MiB parts; docs/benchmarks-history.md "Network"). One part, unchanged, when
/// the push is half of `max_part_bytes` or less, or `max_part_bytes` is 0.
std::vector<gradient_push> split_push(gradient_push push,
                                      int64_t max_part_bytes);

/// The slices of an assembled push, by variable, as the accumulator's
/// pieces (views of the push's values).
std::map<std::string, std::vector<gradient_piece>>
pieces_by_variable(const gradient_push& push);

/// Assembles parts into whole pushes, one push in assembly per worker: a
/// part of a newer local_step from the same worker replaces an unfinished
/// older one (which can no longer be fresh), and a malformed part drops the
/// worker's whole push.
class push_assembler {
public:
  /// The shape of a dense variable of the shard, or null if it has none
  /// of that name.
  using shape_lookup = std::function<const tensor_shape*(const std::string&)>;

  explicit push_assembler(shape_lookup shape_of);

  /// Adds one part: the whole push once its last part is in (variables
  /// that came whole in `dense`, sliced ones as their slices in `slices`,
  /// which cover each exactly once), none while parts are missing, or
  /// ec::bad_message naming what is wrong with the part (part index,
  /// parts count, slice range or overlap, a variable sent twice or
  /// unknown). A push of one part comes back as it is.
  caf::expected<std::optional<gradient_push>> add(gradient_push part);

  /// Pushes of older steps dropped unfinished (their worker went on).
  int64_t abandoned() const noexcept {
    return abandoned_;
  }

  /// Workers with a push in assembly.
  size_t in_assembly() const noexcept {
    return assemblies_.size();
  }

private:
  struct assembly {
    int64_t local_step = 0;
    int32_t parts = 0;
    std::vector<bool> seen;
    int32_t received = 0;
    /// The parts' whole variables, sparse updates and slices so far.
    gradient_push whole;
  };

  caf::error take(assembly& a, gradient_push& part);
  caf::error take_slice(assembly& a, dense_slice& s);
  caf::error check_complete(const assembly& a) const;

  shape_lookup shape_of_;
  std::map<int32_t, assembly> assemblies_;
  int64_t abandoned_ = 0;
};

} // namespace syncfac
