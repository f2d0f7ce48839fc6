#include "runtime/tensorboard/event_record.hpp"

#include <cstring>

#include "runtime/tensorboard/crc32c.hpp"

namespace syncfac::tensorboard {

namespace {

// Protocol buffer wire types.
constexpr uint32_t varint_type = 0;
constexpr uint32_t fixed64_type = 1;
constexpr uint32_t length_type = 2;
constexpr uint32_t fixed32_type = 5;

constexpr int64_t dt_string = 7;

void put_varint(std::string& out, uint64_t x) {
  while (x >= 0x80) {
    out.push_back(static_cast<char>((x & 0x7F) | 0x80));
    x >>= 7;
  }
  out.push_back(static_cast<char>(x));
}

void put_key(std::string& out, uint32_t field, uint32_t type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | type);
}

void put_le(std::string& out, uint64_t x, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, uint32_t field, double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  put_key(out, field, fixed64_type);
  put_le(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  put_key(out, field, fixed32_type);
  put_le(out, bits, 4);
}

void put_int(std::string& out, uint32_t field, int64_t x) {
  put_key(out, field, varint_type);
  // Negative int64 values are ten-byte varints of their two's complement.
  put_varint(out, static_cast<uint64_t>(x));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, length_type);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
  std::string ev;
  put_double(ev, 1, wall_time);
  if (step != 0)
    put_int(ev, 2, step);
  return ev;
}

} // namespace

std::string file_version_event(double wall_time) {
  auto ev = event_header(wall_time, 0);
  put_bytes(ev, 3, "brain.Event:2");
  return ev;
}

std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<scalar_value>& scalars) {
  std::string summary;
  for (const auto& s : scalars) {
    std::string value;
    put_bytes(value, 1, s.tag);
    put_float(value, 2, s.value);
    put_bytes(summary, 1, value);
  }
  auto ev = event_header(wall_time, step);
  put_bytes(ev, 5, summary);
  return ev;
}

std::string text_event(double wall_time, int64_t step, const std::string& tag,
                       const std::string& text) {
  std::string plugin_data;
  put_bytes(plugin_data, 1, "text");
  std::string metadata;
  put_bytes(metadata, 1, plugin_data);
  std::string tensor;
  put_int(tensor, 1, dt_string);
  put_bytes(tensor, 2, std::string{}); // a scalar: a shape of no dimensions
  put_bytes(tensor, 8, text);
  std::string value;
  put_bytes(value, 1, tag);
  put_bytes(value, 8, tensor);
  put_bytes(value, 9, metadata);
  std::string summary;
  put_bytes(summary, 1, value);
  auto ev = event_header(wall_time, step);
  put_bytes(ev, 5, summary);
  return ev;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_int(session_log, 1, 1);
  auto ev = event_header(wall_time, step);
  put_bytes(ev, 7, session_log);
  return ev;
}

std::string frame_record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc(crc32c(out.data(), 8)), 4);
  out += data;
  put_le(out, mask_crc(crc32c(data)), 4);
  return out;
}

} // namespace syncfac::tensorboard
