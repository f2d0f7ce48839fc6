#pragma once

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
// TensorFlow's record files, and TensorFlow's mask of it (a CRC stored next
// to data that itself holds CRCs would otherwise checksum to a constant).
// docs/observability.md "TensorBoard event files" describes the framing.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace syncfac::tensorboard {

/// CRC32C of `size` bytes at `data`; crc32c("123456789") is 0xE3069283.
uint32_t crc32c(const void* data, size_t size);

inline uint32_t crc32c(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}

/// TensorFlow's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
inline uint32_t mask_crc(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

} // namespace syncfac::tensorboard
