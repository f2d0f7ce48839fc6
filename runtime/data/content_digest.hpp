#pragma once

// A digest of every byte a data set holds after decoding, so that the nodes
// of a cluster agree on the whole data set and not only its head
// (docs/distributed.md, "One configuration across every node"). Streaming
// (bytes may come in any pieces) and fast: four 64-bit lanes with
// xxHash64's round, several GB/s, a few percent of a load's time
// (bench/data_digest.cpp). Tells data sets apart; no defence against a
// chosen input.

#include <cstddef>
#include <cstdint>

namespace syncfac {

struct dataset;

class content_digest {
public:
  content_digest() noexcept;

  /// Appends `n` bytes; the digest depends on the bytes only, not on how
  /// they were split into calls.
  void add(const void* bytes, size_t n) noexcept;

  /// The digest of every byte added so far.
  uint64_t value() const noexcept;

private:
  void block(const uint8_t* p) noexcept;

  uint64_t lanes_[4];
  uint8_t tail_[32];
  size_t tail_size_ = 0;
  uint64_t total_ = 0;
};

/// The digest of a data set's shape, its examples (pixels or values) and
/// labels: what every loader stores in dataset::digest.
uint64_t digest_of(const dataset& data) noexcept;

} // namespace syncfac
