#include "runtime/tensorboard/crc32c.hpp"

#include <array>

namespace syncfac::tensorboard {

namespace {

// Byte-at-a-time table: event files are a few kilobytes per log line, so
// the simple table is fast enough and obviously right.
std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[i] = crc;
  }
  return table;
}

} // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const auto table = make_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i)
    crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

} // namespace syncfac::tensorboard
