#pragma once

// The chunks of rows the host defaults of the backend (batch norm, add)
// hand to backend::run_host_parts: about chunk_elements floats each, a
// whole number of rows. They depend on the shape alone, never on the
// thread count, so sums taken per chunk and added in chunk order are the
// same bits on any number of threads.

#include <algorithm>
#include <cstdint>

namespace syncfac::host_chunks {

/// Floats per chunk: a chunk of x and of what is written beside it stays
/// in L1/L2 while each pass over it runs.
inline constexpr int64_t chunk_elements = int64_t{1} << 13;

/// The chunks of m rows of c floats.
struct rows {
  int64_t m = 0;         // rows in all
  int64_t per_chunk = 1; // rows per chunk (the last may hold fewer)
  int64_t count = 0;     // chunks

  struct span {
    int64_t first;
    int64_t last; // one past
  };

  span range(int64_t chunk) const {
    auto first = chunk * per_chunk;
    return {first, std::min(m, first + per_chunk)};
  }
};

inline rows of(int64_t m, int64_t c) {
  rows r;
  r.m = m;
  r.per_chunk = std::max<int64_t>(1, chunk_elements / std::max<int64_t>(c, 1));
  r.count = (m + r.per_chunk - 1) / r.per_chunk;
  return r;
}

} // namespace syncfac::host_chunks
